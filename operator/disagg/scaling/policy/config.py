"""Configuration: what the policy reads from the spec, once, as plain numbers; and the control law's constants."""

from __future__ import annotations

from dataclasses import dataclass

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.pool import PoolName
from disagg.api.resolve import effective_engine, gpus_per_replica, operator_scales, pool_of
from disagg.api.units import parse_duration

POOLS: tuple[PoolName, PoolName] = ("prefill", "decode")

# Defaults of spec.scaling.scaleUp/scaleDown when unset (documented on ScaleBehavior).
DEFAULT_UP_WINDOW_S = 0.0
DEFAULT_DOWN_WINDOW_S = 300.0
DEFAULT_UP_STEP = 4
DEFAULT_DOWN_STEP = 1


@dataclass(frozen=True, slots=True)
class Tuning:
    """Constants of the control law that are not in the API. docs/autoscaling.md says why each has its value."""

    ttft_margin: float = 0.7
    """Let queueing use this share of what the p90 prefill time leaves of the TTFT target: windowed p90s are noisy
    and arrivals burstier than Poisson. (On the wait, not the whole TTFT: with long prompts the prefill time alone
    can be most of the target, and a margin on the total would leave no room to queue at all.)"""
    queue_factor_prior: float = 3.0
    """k in wait_p90 ~= k * rho * S / (2 (1 - rho)) until learned: the M/D/1 mean wait (k = 1) scaled to a tail
    percentile. Like Kingman's (ca^2 + cs^2) / 2, k grows with the burstiness of arrivals, so it is learned."""
    queue_factor_min: float = 1.0
    queue_factor_max: float = 30.0
    learn_min_utilization: float = 0.3
    """Below this utilisation the queueing part of TTFT is too small to measure k from."""
    learn_max_utilization: float = 0.8
    learn_min_wait_share: float = 0.1
    """...and only where the model's queueing wait (at k = 1) is at least this share of the queueing budget: below
    it, whatever TTFT the model does not explain (transfer, the first decode step, bursts inside the window) is
    divided by a tiny wait, and k runs to its clip."""
    service_p90_factor: float = 2.0
    """Prefill time of the p90 prompt over that of the mean prompt, when the source gives no prompt-length p90."""
    min_utilization: float = 0.25
    max_utilization: float = 0.85
    prefill_capacity_prior: float = 10_000.0
    """Prompt tokens/s per GPU assumed until the pool reports its own capacity: deliberately pessimistic."""
    capacity_smoothing: float = 0.3
    backlog_drain_s: float = 60.0
    """Queued prompts are added to demand as if they had to be cleared within this time."""

    itl_margin: float = 0.7
    """Aim decode at this share of the ITL target (of what the target leaves above idle, with
    `itl_margin_above_idle`)."""
    itl_margin_above_idle: bool = True
    """Apply the aim to the part of the ITL target above the fit's idle ITL (as `ttft_margin` applies to the wait,
    not the whole TTFT): where the idle step is half the target, 70% of the whole target leaves a third of the room
    there is."""
    itl_backoff_rise: float = 1.0
    """With `itl_margin_above_idle`: while the generated-token rate is at least this share above its median over
    `itl_backoff_window_s`, aim at `itl_margin` of the whole target instead (0 turns the back-off off). A load that
    builds up (a switch to long outputs: concurrency grows for a whole request duration) outruns a start-up, and
    the aim above idle then scales up too late; once the load settles, the room above idle is safe to use."""
    itl_backoff_window_s: float = 180.0
    itl_backoff_per_request_rise: float = 0.25
    """...and only while the generated tokens per request over the last `itl_backoff_request_window_s` are at least
    this share above those over `itl_backoff_window_s` (0: whatever the requests did). More
    requests of the same length reach their new concurrency within one request duration (bursty's spikes: 250
    tokens, about 20 s); longer outputs build it up for minutes (mix_shift's switch to 2k-token answers), which is
    what the careful aim is for. Without it, every spike of short requests was sized at the careful aim: decode
    ran about twice the replicas a spike needed."""
    itl_backoff_request_window_s: float = 60.0
    """How far back "lately" reaches for the tokens per request (one window's count of clumped arrivals is noisy)."""
    itl_backoff_room_share: float = 0.0
    """...and aim, while backing off, at this share of the room above idle instead (0: at `itl_margin` of the whole
    target). Where the idle step is half the target, the whole-target aim counts a third of the sequences per
    replica the engine runs within the SLO, and a spike that doubles the load asked for three times the replicas."""
    itl_idle_cap: float = 0.6
    """...with the idle counted at most this share of the target, so a fit whose idle runs high cannot aim at the
    target itself."""
    kv_ceiling: float = 0.85
    """Never plan decode above this KV usage: past it vLLM preempts and ITL is no longer the limit."""
    kv_floor: float = 0.05
    itl_prior_idle_share: float = 0.25
    """Prior of the ITL fit: idle ITL is this share of the target..."""
    itl_prior_usage_at_target: float = 0.6
    """...and the target is reached at this KV usage (KV reads alone). The priors fade as observations accumulate."""
    itl_prior_batch_share: float = 0.25
    """...and a full batch (maxNumSeqs) of sequences adds this share of what the target leaves above idle, on top of
    their KV reads: per-sequence work in every step."""
    itl_prior_weight: float = 2.0
    itl_fit_half_life_s: float = 600.0
    itl_fit_on_mean: bool = True
    """Fit the ITL model on the window's exact mean ITL (histogram sum / count) where the source reports it."""
    itl_anchor: bool = True
    """Size the batch from where the pool runs, along a secant from idle (ItlModel.sequences_at)."""
    itl_anchor_min_batch: float = 0.0
    """...only where the pool runs at least this many sequences per replica (0: anywhere). Near idle a secant's
    slope is the ITL's noise over a batch of a sequence or less: it counts a sequence or two per replica, more
    replicas shrink the batch the next window measures, and the pool grows on a load one replica carries (found on
    the held-out code_onoff trace: decode 3 -> 8 on 5 sequences)."""
    itl_point_smoothing: float = 0.3
    """EWMA weight of a window's (batch, mean ITL) in where the pool runs."""
    itl_fit_skips_overload: bool = True
    """Leave windows with a decode queue or KV past the ceiling out of the fit."""
    concurrency_z: float = 1.0
    """Square-root staffing: extra decode capacity of z * sqrt(concurrency) absorbs Poisson fluctuation. Not a
    second count of the aim's margin: at 0.5 and 0 decode was short through the first minutes of mix_shift's
    switches to long outputs (94.1% and 91.1% of windows, D258)."""
    max_batch: float = 256.0
    """vLLM's default max_num_seqs, used when the spec does not set one: a replica never runs more sequences."""

    correction_smoothing: float = 0.3
    """EWMA weight of a new sample of k when it is above the current estimate..."""
    correction_decay: float = 0.05
    """...and when it is below: burstiness is a property of the traffic, learned fast and forgotten slowly, so
    a calm interval at low load does not undo what the last burst taught."""

    tail_control: bool = True
    """Learn k and the decode aim from the share of the window's requests (TTFT) and tokens (ITL) over the target,
    read from the histograms: exact when the target is a bucket bound, where an interpolated p90 is not. A share
    over `tail_high` makes the model more careful at once; one under `tail_low` on a loaded pool relaxes it
    slowly. Only from settled, stationary windows: a window whose load just stepped shows the step, not the model's
    error."""
    tail_high: float = 0.06
    """Over half the 10% a p90 target allows."""
    tail_low: float = 0.01
    queue_factor_up: float = 1.5
    queue_factor_down: float = 0.95
    queue_factor_calm_s: float = 0.0
    """Relax k only when no window of this long had its TTFT tail over `tail_high`, stationary or not (0: any
    time). On on-off traffic the windows that break the tail are the ones whose load just stepped, which never
    raise k; calm stationary windows between bursts lowered it to its floor (code_onoff: 3 -> 1.0)."""
    itl_aim_down: float = 0.9
    itl_aim_up: float = 1.01
    itl_aim_min: float = 0.6
    itl_aim_max: float = 0.7
    """The aim only ever gets more careful than the prior margin: raised toward the target on a calm tail, it took
    decode to the edge of a cliff (one replica fewer broke the target) on a steady load."""
    dispersion_queue_factor: float = 0.0
    """Floor k at this multiple of the arrivals' dispersion over the last `dispersion_window_s` (0 turns it off):
    the mean squared change of the computed prompt tokens between consecutive windows, over twice the mean
    window's tokens times the mean computed prompt (about ca^2 + cs^2, Kingman's burstiness; 1-2 on Poisson
    arrivals, 9-13 on bursty's Gamma CV 3 arrivals, 17-29 in code_onoff's on-periods). Read from the arrivals,
    not from the TTFT tail, so it holds where the tail rule cannot learn: on-off and clumped traffic, whose
    windows are rarely stationary. Differences of consecutive windows, not the variance around the mean, so a
    slow trend (diurnal) adds little, and without the largest one, so a step of the level adds nothing."""
    clump_headroom: float = 1.0
    """Size prefill for its load plus a clump of this many times the arrivals' dispersion (in mean computed
    prompts; see `dispersion_queue_factor`) cleared within the TTFT target (0 turns it off): the wait of a batch
    arrival, which a window's mean utilisation does not show. With Gamma CV 3 arrivals (bursty) requests come in
    clumps of tens of prompts, and 3 prefill replicas at 35% utilisation broke a 2.5 s TTFT p90. 1.0 chosen on the
    tuning set (bursty +2.3 points of windows over 30 seeds for +0.7% GPU-hours, the other four within noise;
    1.5 and 2.0 cost steady 3% and 8%), then replayed on the held-out set (docs/autoscaling.md,
    "Prefill sized for clumps")."""
    dispersion_window_s: float = 600.0
    dispersion_min_windows: int = 8
    """...from at least this many consecutive pairs of windows."""
    stationary_change: float = 0.25
    """A window is stationary when its load moved less than this share since the last evaluation."""

    feedback_min_queue: float = 1.0
    """The feedback path needs at least this many requests queued on average: a broken TTFT with an empty prefill
    queue is not prefill's doing (in P/D it is usually the decode admission that just drained)."""
    draining_share: float = 0.7
    """The queue counts as draining, and the feedback path waits, when it fell below this share of the last one."""
    decode_queue_share: float = 0.05
    """Decode counts as queued only when the waiting requests are at least this share of the running batch."""
    decode_queue_room: float = 0.5
    """...and only while its batch per replica or its KV usage is at least this share of its cap or ceiling (0:
    at any size). With room for as many sequences again, the waiting requests are KV transfers still under way,
    not a shortage of slots: on short answers (a code assistant's 14 tokens) they are a large share of the batch,
    the feedback path doubled decode for them, and they blocked prefill's own feedback and learning."""

    burst_hold_windows: float = 4.0
    """After the pool was caught short (see `burst_factor`), scale down only to the highest recommendation of up to
    this many scaleDown stabilisation windows (20 min with the default 5 min): a load that jumped faster than
    replicas start once is likely to jump again, and its first minutes are lost whatever the reaction. A multiple
    of the spec's window, so a user who asks for fast release still gets it. Proposed as an API field in
    docs/autoscaling.md."""
    burst_hold_adaptive: bool = True
    """Hold only as long as the bursts seen so far have been apart: `burst_gap_factor` times the longest recent gap
    between bursts (`burst_gap_quantile`), within [1, burst_hold_windows] scaleDown windows, and no extra hold
    until a second burst shows that they recur. A fixed hold sized for one trace's spikes (9 minutes apart) kept
    peak capacity through long calm stretches on traces whose bursts come every minute or two, where the plain
    window already spans the gaps."""
    burst_gap_factor: float = 1.0
    burst_gap_quantile: float = 1.0
    """Which of the recent gaps between bursts the adaptive hold is sized on (0.5: the median, 1: the longest). The
    gaps between a trace's spikes are irregular (bursty: 2-30 minutes): a hold of 1.25 x the median let the capacity
    go before about half of the next spikes arrived, and each such release is two reversals and a lost minute."""
    burst_episode_windows: float = 1.0
    """A burst within this many scaleDown windows of the pool's last one continues the same episode: it renews the
    hold but does not count as a new burst in the gaps (0: every caught-short scale-up is a burst of its own). One
    spike caught short takes two or three scale-ups a minute or two apart; counted as bursts, those steps put
    one-minute gaps into the median and the hold let the capacity go between spikes that recur every 10-20
    minutes."""
    burst_hold_sustained: bool = False
    """Past the plain scaleDown window, the hold keeps the highest need of the load alone (without the feedback
    path and the backlog term), not the highest recommendation (False): see limits.held_to."""
    burst_hold_shared: bool = False
    """(Measured, not adopted: fewer decode reversals for 5% more GPU-hours on bursty.) Each pool holds through the
    other's bursts too: in P/D a spike of requests is a spike for both pools, but
    only prefill is caught short (decode's scale-ups at a spike are the model's, never a broken SLO), so decode
    alone never learns that the spikes recur and gives its replicas back between them."""
    learn_floor: bool = True
    """A pool caught short within one scaleDown window of our own scale-down learns that the size it came down
    to is too small: it is not scaled below the next one up for `burst_memory_s`. The load model cannot see every
    shortage: with clumped arrivals (bursty's Gamma CV 3 base load) the queueing model's need at 15% utilisation is
    half a replica, while the clumps break the TTFT of two; each such scale-down came back within minutes, as two
    reversals and a lost window."""
    learn_floor_windows: float = 2.0
    """How many scaleDown windows after our scale-down a shortage teaches the floor."""
    learn_floor_any: str = "decode"
    """Pools ("decode", "prefill,decode") where any scale-up within `learn_floor_windows` of our own scale-down
    teaches the floor, not only one on a broken SLO: the model asked for the replica back, so the scale-down was
    the first half of a reversal (a need that hovers at an integer boundary, as a multi-turn load's does, flaps
    across it). Decode's scale-ups are the model's (its SLO is rarely broken first), so the plain rule never
    teaches it; prefill's bursts have the burst hold."""
    learn_floor_load_share: float = 0.0
    """The learned floor holds only while the pool's load is at least this share of what it was when the floor was
    learned (0: whatever the load). A floor learned while a long-output phase ran kept decode at its size through
    the next phase's tenth of the load (mix_shift: 5 decode replicas for 125 generated tokens/s)."""
    burst_memory_s: float = 3600.0
    """Bursts older than this no longer say how often they come."""
    burst_factor: float = 2.0
    """Caught short: a scale-up while the SLO was already broken, or to at least this many times (and two more
    than) the replicas the pool had."""

    reserve_quantile: float = 0.0
    """Never scale down below this quantile of the need over `reserve_window_s` (0 turns it off)."""
    reserve_window_s: float = 1200.0
    """How far back `reserve_quantile` looks (the history is kept this long only while the reserve is on)."""
    forecast_horizon_s: float = 0.0
    """Scale up to the need this far ahead (a replica's start-up plus an interval) while the need climbs
    significantly over `forecast_window_s`; 0 turns it off."""
    forecast_window_s: float = 120.0
    rise_t: float = 2.0
    """No scale-down while the need's slope over the scaleDown window is positive at this t-statistic..."""
    rise_min: float = 0.1
    """...and adds up to at least this many replicas over the window."""

    up_tolerance: float = 0.1
    """Scale up only for a need more than this share above the replicas there (or a broken SLO)."""
    down_tolerance: float = 0.1
    """Scale down to k replicas only when the need is below k * (1 - tolerance): a hysteresis band."""
    down_sensitivity: float = 0.85
    """Scale down only if observed latency is below this share of the target."""
    stale_after_intervals: float = 3.0

    @property
    def reads_dispersion(self) -> bool:
        """Whether a rule reads the arrivals' dispersion (and so the pool keeps `dispersion_window_s` of history)."""
        return self.dispersion_queue_factor > 0 or self.clump_headroom > 0


@dataclass(frozen=True, slots=True)
class PoolLimits:
    name: PoolName
    scaled: bool
    """Whether this policy owns the pool's replicas (autoscaling enabled with the operator controller)."""
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    spec_replicas: int


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Everything the policy reads from the DisaggDeploymentSpec, as plain numbers in seconds."""

    ttft_target_s: float | None
    itl_target_s: float | None
    interval_s: float
    """How often the shell evaluates (spec.scaling.interval; 30 s when unset or zero). The only parse of it: the
    reconciler's requeue reads it from here too."""
    up_window_s: float
    down_window_s: float
    up_step: int
    down_step: int
    max_gpus: int | None
    ratio_min: float | None
    ratio_max: float | None
    prefill: PoolLimits
    decode: PoolLimits
    decode_max_batch: int | None = None
    """The decode engines' max_num_seqs, when the spec sets it: no replica runs more sequences."""

    def limits(self, name: PoolName) -> PoolLimits:
        return self.prefill if name == "prefill" else self.decode


def _seconds(value: str | None, default: float | None) -> float | None:
    return default if value is None else float(parse_duration(value))


def config_from_spec(spec: DisaggDeploymentSpec) -> PolicyConfig:
    scaling = spec.scaling

    def limits(name: PoolName) -> PoolLimits:
        pool = pool_of(spec, name)
        auto = pool.autoscaling
        return PoolLimits(
            name=name,
            scaled=operator_scales(pool),
            min_replicas=auto.min_replicas,
            max_replicas=auto.max_replicas if auto.max_replicas is not None else max(pool.replicas, 1),
            gpus_per_replica=gpus_per_replica(pool),
            spec_replicas=pool.replicas,
        )

    return PolicyConfig(
        ttft_target_s=_seconds(scaling.slo.ttft_p90, None),
        itl_target_s=_seconds(scaling.slo.itl_p90, None),
        interval_s=_seconds(scaling.interval, 30.0) or 30.0,
        up_window_s=_seconds(scaling.scale_up.stabilization_window, DEFAULT_UP_WINDOW_S) or 0.0,
        down_window_s=_seconds(scaling.scale_down.stabilization_window, DEFAULT_DOWN_WINDOW_S) or 0.0,
        up_step=scaling.scale_up.max_step or DEFAULT_UP_STEP,
        down_step=scaling.scale_down.max_step or DEFAULT_DOWN_STEP,
        max_gpus=scaling.max_gpus,
        ratio_min=scaling.ratio.min,
        ratio_max=scaling.ratio.max,
        prefill=limits("prefill"),
        decode=limits("decode"),
        decode_max_batch=effective_engine(spec, "decode").max_num_seqs,
    )


DEFAULT_TUNING = Tuning()
