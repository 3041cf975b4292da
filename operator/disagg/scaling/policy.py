"""The pure scaling policy: metrics snapshots + spec + previous state -> desired replicas per pool.

No I/O, no clock, no randomness: time comes in as `now`, everything the policy remembers goes out in the returned
`PolicyState` and comes back on the next call. docs/autoscaling.md derives the control law; in short:

* prefill is sized so the queue in front of it keeps TTFT p90 under target: per-replica capacity C (tokens/s,
  measured), a target utilisation rho*(n) from a G/G/n waiting-time tail with a learned burstiness factor k,
  N_p = lambda_tokens / (rho* C), never at or below a count found too small;
* decode by Little's law on generated tokens: ITL p90 = a + b*KV usage + c*batch/maxNumSeqs fitted online (a
  fixed, a per-KV-token and a per-sequence cost), the batch per replica where that meets the ITL target, and
  N_d = tokens/s * ITL* / batch with square-root headroom;
* a proportional feedback path adds replicas at once when the SLO is already broken with a real queue, except
  while replicas start, right after capacity changed, or while the queue is draining;
* up fast (step-limited); down only after a stabilisation window, within a tolerance band, if the survivors can
  absorb the load and the need is not climbing; after a burst (caught short) the window is held 3x longer;
  min/max per pool, P:D ratio bounds and the GPU budget last.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.pool import PoolName
from disagg.api.resolve import effective_engine, gpus_per_replica, operator_scales, pool_of
from disagg.api.units import parse_duration

from .snapshot import MetricsHealth, Observation, PoolSnapshot

POOLS: tuple[PoolName, PoolName] = ("prefill", "decode")

# Defaults of spec.scaling.scaleUp/scaleDown when unset (documented on ScaleBehavior).
DEFAULT_UP_WINDOW_S = 0.0
DEFAULT_DOWN_WINDOW_S = 300.0
DEFAULT_UP_STEP = 4
DEFAULT_DOWN_STEP = 1


# --------------------------------------------------------------------------------------------------------------
# Configuration


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
    queue_factor_max: float = 100.0
    learn_min_utilization: float = 0.3
    """Below this utilisation the queueing part of TTFT is too small to measure k from."""
    learn_max_utilization: float = 0.8
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
    """Aim decode at this share of the ITL target."""
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
    concurrency_z: float = 1.0
    """Square-root staffing: extra decode capacity of z * sqrt(concurrency) absorbs Poisson fluctuation."""
    max_batch: float = 256.0
    """vLLM's default max_num_seqs, used when the spec does not set one: a replica never runs more sequences."""

    correction_smoothing: float = 0.3
    """EWMA weight of a new sample of k when it is above the current estimate..."""
    correction_decay: float = 0.05
    """...and when it is below: burstiness is a property of the traffic, learned fast and forgotten slowly, so
    a calm interval at low load does not undo what the last burst taught."""

    feedback_min_queue: float = 1.0
    """The feedback path needs at least this many requests queued on average: a broken TTFT with an empty prefill
    queue is not prefill's doing (in P/D it is usually the decode admission that just drained)."""
    draining_share: float = 0.7
    """The queue counts as draining, and the feedback path waits, when it fell below this share of the last one."""
    decode_queue_share: float = 0.05
    """Decode counts as queued only when the waiting requests are at least this share of the running batch."""

    burst_hold_windows: float = 3.0
    """After the pool was caught short (see `burst_factor`), scale down only to the highest recommendation of this
    many scaleDown stabilisation windows (15 min with the default 5 min): a load that jumped faster than replicas
    start once is likely to jump again, and its first minutes are lost whatever the reaction. A multiple of the
    spec's window, so a user who asks for fast release still gets it. Proposed as an API field in
    docs/autoscaling.md."""
    burst_factor: float = 2.0
    """Caught short: a scale-up while the SLO was already broken, or to at least this many times (and two more
    than) the replicas the pool had."""

    rise_t: float = 2.0
    """No scale-down while the need's slope over the scaleDown window is positive at this t-statistic..."""
    rise_min: float = 0.1
    """...and adds up to at least this many replicas over the window."""

    down_tolerance: float = 0.1
    """Scale down to k replicas only when the need is below k * (1 - tolerance): a hysteresis band."""
    down_sensitivity: float = 0.85
    """Scale down only if observed latency is below this share of the target."""
    stale_after_intervals: float = 3.0


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


# --------------------------------------------------------------------------------------------------------------
# State


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One evaluation's unconstrained answer for one pool, kept for the stabilisation windows."""

    at: float
    up_to: int
    """Replicas needed now (ceil of the need)."""
    down_to: int
    """Replicas that would still leave the tolerance band of headroom (ceil of need / (1 - tolerance))."""
    need: float = 0.0
    """The continuous need itself, for the trend over the window."""


@dataclass(frozen=True, slots=True)
class PoolMemory:
    replicas: int | None = None
    """The last decision: what the pool was told to have."""
    changed_at: float | None = None
    direction: int = 0
    """+1 or -1 for the last change, to count reversals."""
    history: tuple[Recommendation, ...] = ()
    observed_at: float | None = None
    """First evaluation with usable metrics: no scale-down before a whole window has been seen."""
    ready: int | None = None
    """Ready replicas at the last evaluation: latency measured across a change in capacity is stale evidence."""
    waiting: float | None = None
    """Requests queued at the last evaluation: a queue that is shrinking is being served by the capacity in place."""
    burst_at: float | None = None
    """Last time the pool was caught short by a burst: scale-downs use the longer burst window for that long after."""


@dataclass(frozen=True, slots=True)
class ItlFit:
    """Exponentially forgetting least-squares sums for ITL p90 = a + b * u + c * q, where u is the KV usage and q
    the running sequences per replica over the batch cap: one decode step costs a fixed part (weights), a part per
    KV token read and a part per sequence. `moments` holds the weighted sums of x_i * x_j and x_i * y over
    x = (1, u, q), in the order of `_MOMENTS`."""

    moments: tuple[float, ...] = (0.0,) * 9
    at: float | None = None


@dataclass(frozen=True, slots=True)
class PolicyState:
    prefill: PoolMemory = field(default_factory=PoolMemory)
    decode: PoolMemory = field(default_factory=PoolMemory)
    prefill_capacity: float | None = None
    """Measured prompt tokens/s of one prefill replica while busy (smoothed)."""
    queue_factor: float | None = None
    """k of the prefill queueing model, learned from observed TTFT p90 (smoothed, clipped); None until learned."""
    itl_fit: ItlFit = field(default_factory=ItlFit)

    def memory(self, name: PoolName) -> PoolMemory:
        return self.prefill if name == "prefill" else self.decode

    def with_memory(self, name: PoolName, memory: PoolMemory) -> PolicyState:
        return replace(self, prefill=memory) if name == "prefill" else replace(self, decode=memory)


# --------------------------------------------------------------------------------------------------------------
# Output

HoldReason = Literal["MetricsMissing", "MetricsStale", "MetricsPartial", "NoReadyReplicas", "NoSloTarget"]


@dataclass(frozen=True, slots=True)
class PoolDecision:
    pool: PoolName
    replicas: int
    previous: int
    need: float | None
    """The model's continuous replica need before rounding, stabilisation and limits (None when held)."""
    reason: str
    hold: HoldReason | None = None

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


@dataclass(frozen=True, slots=True)
class ScalingCondition:
    """The ScalingActive condition the shell writes to status."""

    status: Literal["True", "False"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decision:
    prefill: PoolDecision | None
    """None when the operator does not scale the pool (autoscaling off or an external controller)."""
    decode: PoolDecision | None
    state: PolicyState
    condition: ScalingCondition

    def pool(self, name: PoolName) -> PoolDecision | None:
        return self.prefill if name == "prefill" else self.decode

    @property
    def changed(self) -> bool:
        return any(d is not None and d.changed for d in (self.prefill, self.decode))


DEFAULT_TUNING = Tuning()

# --------------------------------------------------------------------------------------------------------------
# Entry point


def decide(
    spec: DisaggDeploymentSpec | PolicyConfig,
    observation: Observation,
    state: PolicyState | None,
    now: float,
    tuning: Tuning = DEFAULT_TUNING,
) -> Decision:
    """One evaluation. Call every spec.scaling.interval with fresh snapshots and the state returned last time."""
    config = spec if isinstance(spec, PolicyConfig) else config_from_spec(spec)
    state = _learn(config, observation, state or PolicyState(), now, tuning)
    proposals: dict[PoolName, _Proposal] = {}
    for name in POOLS:
        if config.limits(name).scaled:
            proposals[name] = _propose(config, observation, name, state, now, tuning)
    final = _constrain(config, proposals, state, observation, now, tuning)
    decisions: dict[PoolName, PoolDecision] = {}
    for name, proposal in proposals.items():
        decisions[name] = _pool_decision(name, proposal, final[name], state, observation)
        state = _remember(state, name, proposal, final[name], now, tuning, config, observation)
    return Decision(
        prefill=decisions.get("prefill"),
        decode=decisions.get("decode"),
        state=state,
        condition=_condition(decisions.values()),
    )


# --------------------------------------------------------------------------------------------------------------
# Learning: capacity, corrections and trends from this observation


def _stale(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> bool:
    return now - snap.taken_at > tuning.stale_after_intervals * config.interval_s


def _trusted(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> bool:
    return snap.usable and snap.ready_replicas > 0 and not _stale(config, snap, now, tuning)


def _ewma(previous: float | None, sample: float, smoothing: float) -> float:
    return sample if previous is None else previous + smoothing * (sample - previous)


def _learn(config: PolicyConfig, obs: Observation, state: PolicyState, now: float, tuning: Tuning) -> PolicyState:
    if _trusted(config, obs.prefill, now, tuning):
        state = _learn_prefill(config, obs.prefill, state, tuning)
    if _trusted(config, obs.decode, now, tuning):
        state = _learn_decode(config, obs.decode, state, now, tuning)
    return state


def _learn_prefill(config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, tuning: Tuning) -> PolicyState:
    capacity = state.prefill_capacity
    if snap.prefill_tokens_per_busy_s is not None and snap.prefill_tokens_per_busy_s > 0:
        capacity = _ewma(capacity, snap.prefill_tokens_per_busy_s, tuning.capacity_smoothing)
    state = replace(state, prefill_capacity=capacity)
    capacity = _capacity(config, state, tuning)
    # The queueing part of the observed TTFT p90 (minus the p90 service time) against the model's rho*S/(2(1-rho))
    # measures k at the current utilisation. Only in the range where the queue is both visible and finite.
    times = _service_times(snap, capacity, tuning)
    demand = snap.uncached_prompt_token_rate
    if snap.ttft_p90_s is None or times is None or demand is None:
        return state
    rho = demand / (snap.ready_replicas * capacity)
    # Only from a stationary queue: not across a change in capacity, not near saturation (a growing backlog would
    # be read as burstiness and then over-provision every later burst).
    settled = snap.starting_replicas == 0 and state.prefill.ready == snap.ready_replicas
    if not settled or not tuning.learn_min_utilization <= rho <= tuning.learn_max_utilization:
        return state
    wait = max(snap.ttft_p90_s - times[1], 0.0)
    sample = wait / _queue_wait(1.0, rho, snap.ready_replicas, times[0])
    sample = min(max(sample, tuning.queue_factor_min), tuning.queue_factor_max)
    rising = state.queue_factor is None or sample > state.queue_factor
    weight = tuning.correction_smoothing if rising else tuning.correction_decay
    return replace(state, queue_factor=_ewma(state.queue_factor, sample, weight))


def _learn_decode(
    config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, now: float, tuning: Tuning
) -> PolicyState:
    if snap.itl_p90_s is None or snap.kv_cache_usage is None or not snap.running_requests:
        return state
    fit = state.itl_fit
    decay = 1.0 if fit.at is None else 0.5 ** (max(now - fit.at, 0.0) / tuning.itl_fit_half_life_s)
    x = (1.0, snap.kv_cache_usage, snap.running_requests / snap.ready_replicas / _max_batch(config, tuning))
    sample = _moments(x, snap.itl_p90_s, 1.0)
    return replace(
        state,
        itl_fit=ItlFit(moments=tuple(m * decay + v for m, v in zip(fit.moments, sample, strict=True)), at=now),
    )


_MOMENTS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2), (0, -1), (1, -1), (2, -1))
"""(i, j) of the sums in ItlFit.moments: x_i * x_j, or x_i * y when j is -1."""


def _moments(x: tuple[float, float, float], y: float, weight: float) -> tuple[float, ...]:
    return tuple(weight * x[i] * (y if j < 0 else x[j]) for i, j in _MOMENTS)


# --------------------------------------------------------------------------------------------------------------
# Models


def _capacity(config: PolicyConfig, state: PolicyState, tuning: Tuning) -> float:
    if state.prefill_capacity is not None:
        return state.prefill_capacity
    return tuning.prefill_capacity_prior * config.prefill.gpus_per_replica


def _service_times(snap: PoolSnapshot, capacity: float, tuning: Tuning) -> tuple[float, float] | None:
    """Mean and p90 prefill time of one prompt on an idle replica."""
    mean_prompt = snap.mean_prompt_tokens
    if mean_prompt is None:
        return None
    uncached = 1.0 - min(max(snap.prefix_hit_rate or 0.0, 0.0), 1.0)
    mean = max(mean_prompt * uncached, 1.0) / capacity
    if snap.prompt_tokens_p90 is None:
        return mean, mean * tuning.service_p90_factor
    return mean, max(snap.prompt_tokens_p90 * uncached / capacity, mean)


def _queue_factor(state: PolicyState, tuning: Tuning) -> float:
    return state.queue_factor if state.queue_factor is not None else tuning.queue_factor_prior


def _queue_wait(k: float, rho: float, replicas: int, mean_s: float) -> float:
    """p90 wait in front of `replicas` servers at utilisation rho: Sakasegawa's G/G/n approximation
    k * S * rho^(sqrt(2(n+1)) - 1) / (2 n (1 - rho)). At n = 1 it is the M/D/1 mean wait times k (Kingman's
    form); more replicas behind one router pool their queue, which waits less at the same utilisation."""
    exponent = math.sqrt(2.0 * (replicas + 1)) - 1.0
    return k * mean_s * math.pow(rho, exponent) / (2.0 * replicas * (1.0 - rho))


def _target_utilization(target: float, mean_s: float, p90_s: float, k: float, replicas: int, tuning: Tuning) -> float:
    """Largest rho at which `replicas` servers keep p90 service + p90 queue wait within the TTFT budget."""
    budget = (target - p90_s) * tuning.ttft_margin
    if budget <= 0:
        return tuning.min_utilization
    lo, hi = 0.0, 0.999
    for _ in range(40):  # the wait grows monotonically with rho: bisect
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _queue_wait(k, mid, replicas, mean_s) <= budget else (lo, mid)
    return min(max(lo, tuning.min_utilization), tuning.max_utilization)


def _prefill_need(
    demand: float, capacity: float, target: float, times: tuple[float, float], k: float, limit: int, tuning: Tuning
) -> tuple[float, float]:
    """Fewest replicas whose target utilisation covers the demand, as a continuous need, and that utilisation.

    The need is demand / (rho*(n) C) at the n found, but never n - 1 or less: n - 1 replicas were just found too
    few, even where rho*(n), higher than rho*(n - 1) because more servers pool their queue, would put the plain
    ratio under n - 1 (and ceil() would then keep the pool at the size that misses the target)."""
    rho = tuning.max_utilization
    replicas = 1
    for replicas in range(1, max(limit, 1) * 2 + 1):
        rho = _target_utilization(target, times[0], times[1], k, replicas, tuning)
        if demand <= replicas * rho * capacity:
            break
    return max(demand / (rho * capacity), replicas - 1 + 1e-6), rho


def _max_batch(config: PolicyConfig, tuning: Tuning) -> float:
    return float(config.decode_max_batch or tuning.max_batch)


@dataclass(frozen=True, slots=True)
class _ItlModel:
    """ITL p90 = idle + per_usage * KV usage + per_batch * (sequences per replica / batch cap)."""

    idle: float
    per_usage: float
    per_batch: float

    def sequences_at(self, itl: float, usage_per_sequence: float, max_batch: float) -> float:
        """Sequences one replica runs at this ITL, when each holds `usage_per_sequence` of its KV cache."""
        per_sequence = self.per_usage * usage_per_sequence + self.per_batch / max_batch
        return max(itl - self.idle, 0.0) / max(per_sequence, 1e-12)


def _itl_model(config: PolicyConfig, state: PolicyState, tuning: Tuning) -> _ItlModel:
    """Least squares on the observations plus three prior points that fade as data accumulates: idle ITL at a share
    of the target; the target reached at a KV usage (KV reads); a full batch of tiny sequences adding a share of
    the target (per-sequence work). One workload mix puts the data on a line in (u, q); the priors decide the rest
    until a mix change separates the two costs."""
    target = config.itl_target_s or 0.05
    idle = tuning.itl_prior_idle_share * target
    per_usage = (target - idle) / tuning.itl_prior_usage_at_target
    per_batch = tuning.itl_prior_batch_share * (target - idle)
    prior = ((0.0, 0.0, idle), (tuning.itl_prior_usage_at_target, 0.0, target), (0.0, 1.0, idle + per_batch))
    sums = list(state.itl_fit.moments)
    for u, q, y in prior:
        for k, v in enumerate(_moments((1.0, u, q), y, tuning.itl_prior_weight)):
            sums[k] += v
    m = {key: sums[k] for k, key in enumerate(_MOMENTS)}

    def gram(i: int, j: int) -> float:
        return m[(min(i, j), max(i, j))]

    # ITL does not fall as load grows: a coefficient the data drives below its floor is pinned there and the
    # others refitted. Floors: a quarter of the prior slope for KV reads, zero for the per-sequence part.
    floors = {1: 0.25 * per_usage, 2: 0.0}
    pinned: dict[int, float] = {}
    for _ in range(3):
        free = [i for i in range(3) if i not in pinned]
        rhs = [m[(i, -1)] - sum(gram(i, j) * v for j, v in pinned.items()) for i in free]
        solved = _solve([[gram(i, j) for j in free] for i in free], rhs)
        coefficients = dict(zip(free, solved, strict=True)) if solved is not None else {0: idle, 1: per_usage, 2: 0.0}
        coefficients.update(pinned)
        low = [i for i, floor in floors.items() if i not in pinned and coefficients[i] < floor]
        if not low:
            break
        pinned[low[0]] = floors[low[0]]
    return _ItlModel(max(coefficients[0], 0.0), coefficients[1], coefficients[2])


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting for the small normal equations; None when singular."""
    n = len(b)
    rows = [[*a[i], b[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-12:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / rows[col][col]
            rows[r] = [v - factor * w for v, w in zip(rows[r], rows[col], strict=True)]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (rows[r][n] - sum(rows[r][k] * out[k] for k in range(r + 1, n))) / rows[r][r]
    return out


# --------------------------------------------------------------------------------------------------------------
# Proposal per pool: model need, forecast and feedback


@dataclass(frozen=True, slots=True)
class _Proposal:
    need: float | None
    """Replicas the model asks for, before rounding, stabilisation and limits (None: hold)."""
    why: str
    hold: HoldReason | None = None
    hold_message: str = ""
    safe_to_shrink: bool = True
    shrink_note: str = ""
    breach: bool = False
    """The observation already broke the pool's SLO or limits (whether or not the feedback path acted on it)."""
    settling: bool = False
    """The window straddles our own scale-down taking effect: the survivors' caches are still warming."""


def _propose(
    config: PolicyConfig, observation: Observation, name: PoolName, state: PolicyState, now: float, tuning: Tuning
) -> _Proposal:
    snap = observation.pool(name)
    hold = _hold_reason(config, snap, now, tuning)
    if hold is not None:
        return _Proposal(need=None, why="", hold=hold[0], hold_message=hold[1])
    memory = state.memory(snap.pool)
    if snap.pool == "prefill":
        decode = observation.decode
        queue = decode.waiting_requests if _trusted(config, decode, now, tuning) else None
        proposal = _propose_prefill(config, snap, state, memory, tuning, queue)
    else:
        proposal = _propose_decode(config, snap, state, memory, tuning)
    # A replica we removed just left: its share of the traffic lands on survivors whose prefix caches do not hold it
    # yet, so uncached work and latency jump for about one window. Not evidence that the scale-down was wrong.
    settling = memory.direction < 0 and memory.ready is not None and snap.ready_replicas < memory.ready
    return replace(proposal, settling=settling)


def _hold_reason(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> tuple[HoldReason, str] | None:
    target = config.ttft_target_s if snap.pool == "prefill" else config.itl_target_s
    if target is None:
        return "NoSloTarget", f"no {'ttftP90' if snap.pool == 'prefill' else 'itlP90'} target to size {snap.pool} by"
    detail = f": {snap.health_reason}" if snap.health_reason else ""
    if snap.health is MetricsHealth.MISSING or snap.window_s <= 0:
        return "MetricsMissing", f"{snap.pool} metrics missing{detail}"
    if snap.health is MetricsHealth.PARTIAL:
        return "MetricsPartial", f"{snap.pool} metrics incomplete{detail}"
    if snap.health is MetricsHealth.STALE or _stale(config, snap, now, tuning):
        return "MetricsStale", f"{snap.pool} metrics are {now - snap.taken_at:.0f}s old{detail}"
    if snap.ready_replicas <= 0:
        return "NoReadyReplicas", f"no ready {snap.pool} replica to measure load on"
    return None


def _feedback_need(memory: PoolMemory, snap: PoolSnapshot, ratio: float, tuning: Tuning) -> float | None:
    """Proportional path: replicas in proportion to how far the SLO is already broken, at most doubling.

    Not while replicas are starting (they are the answer to these very symptoms), not right after the ready count
    changed (the window's latency then mostly shows the queue built before the new capacity arrived), and not while
    the queue is draining: the capacity in place is already catching up, and the latency is the backlog's."""
    if ratio <= 1.0 or snap.starting_replicas > 0 or memory.ready != snap.ready_replicas:
        return None
    waiting = snap.waiting_requests or 0.0
    if memory.waiting is not None and waiting < tuning.draining_share * memory.waiting:
        return None
    return snap.ready_replicas * min(ratio, 2.0)


def _propose_prefill(
    config: PolicyConfig,
    snap: PoolSnapshot,
    state: PolicyState,
    memory: PoolMemory,
    tuning: Tuning,
    decode_queue: float | None,
) -> _Proposal:
    target = config.ttft_target_s or 1.0
    capacity = _capacity(config, state, tuning)
    times = _service_times(snap, capacity, tuning)
    demand = snap.uncached_prompt_token_rate or 0.0
    mean_prompt = snap.mean_prompt_tokens or 0.0
    # While replicas are starting, the queue is what they were ordered for: counting it again would double count.
    pending = snap.starting_replicas > 0
    backlog = 0.0 if pending else (snap.waiting_requests or 0.0) * mean_prompt / tuning.backlog_drain_s
    planned = demand + backlog
    if times is not None:
        k = _queue_factor(state, tuning)
        need, rho = _prefill_need(planned, capacity, target, times, k, config.prefill.max_replicas, tuning)
    else:
        rho = tuning.max_utilization
        need = planned / (rho * capacity)
    why = (
        f"prefill {demand:.0f} tok/s (+{backlog:.0f} backlog) at capacity {capacity:.0f} tok/s/replica, "
        f"target utilisation {rho:.2f} (queueing factor {_queue_factor(state, tuning):.1f})"
    )
    fb = _feedback_need(memory, snap, (snap.ttft_p90_s or 0.0) / target, tuning)
    # In P/D a request's first token also waits for a decode slot: with decode queueing, the broken TTFT is
    # decode's to fix, and more prefill would only queue more KV in front of it.
    blocked = decode_queue is not None and decode_queue >= 1.0
    queue = (snap.waiting_requests or 0.0) >= tuning.feedback_min_queue
    feedback = fb is not None and not blocked and queue and fb > need
    if feedback and fb is not None:
        need = fb
        why = f"TTFT p90 {snap.ttft_p90_s or 0:.3f}s over target {target:.3f}s with a queue; " + why
    ttft = snap.ttft_p90_s
    safe = ttft is None or ttft <= tuning.down_sensitivity * target
    note = "" if safe else f"TTFT p90 {ttft or 0:.3f}s is near the {target:.3f}s target"
    breach = (snap.ttft_p90_s or 0.0) >= target and queue and not blocked
    return _Proposal(need, why, safe_to_shrink=safe, shrink_note=note, breach=breach)


def _propose_decode(
    config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, memory: PoolMemory, tuning: Tuning
) -> _Proposal:
    """Little's law on generated tokens: the rate is the same whatever the replica count, unlike KV usage or
    concurrency, which grow when fewer replicas make every token slower."""
    target = config.itl_target_s or 0.05
    usage, running, rate = snap.kv_cache_usage, snap.running_requests or 0.0, snap.generation_token_rate
    if usage is None or rate is None or running < 1.0:
        # Nothing to measure the cost of a sequence on (idle or unknown): size by the floor of one busy replica.
        current = memory.replicas if memory.replicas is not None else snap.ready_replicas + snap.starting_replicas
        idle = usage is not None and rate is not None and rate <= 0.0
        need = 0.0 if idle else float(current)
        return _Proposal(need, "decode idle" if idle else "decode load unknown; holding the current size")
    usage_per_sequence = max(usage * snap.ready_replicas / running, 1e-6)
    model = _itl_model(config, state, tuning)
    itl_at_target = tuning.itl_margin * target
    max_batch = _max_batch(config, tuning)
    batch = min(
        model.sequences_at(itl_at_target, usage_per_sequence, max_batch),
        tuning.kv_ceiling / usage_per_sequence,
        max_batch,
    )
    batch = max(batch, 1.0)
    # Sequences waiting for a decode slot need one too (Little's law only counts those being served).
    waiting = snap.waiting_requests or 0.0
    concurrency = rate * itl_at_target + waiting
    headroom = 1.0 + tuning.concurrency_z / math.sqrt(max(concurrency, 1.0))
    need = concurrency * headroom / batch
    why = (
        f"decode {rate:.0f} tok/s; at ITL {itl_at_target * 1e3:.1f}ms that is {concurrency:.0f} sequences, "
        f"{batch:.0f} per replica (fit {model.idle * 1e3:.1f}ms + {model.per_usage * 1e3:.1f}ms*usage + "
        f"{model.per_batch * 1e3:.1f}ms*batch/{max_batch:.0f}, {usage_per_sequence:.4f} usage per sequence)"
    )
    # A few sequences waiting a moment for their KV transfer are not a shortage; a queue this share of the batch is.
    material = waiting >= max(tuning.feedback_min_queue, tuning.decode_queue_share * running)
    queued = (running + waiting) / running if material else 0.0
    # A batch near maxNumSeqs has no slot left for the next arrivals, whatever the ITL says yet.
    full = running / snap.ready_replicas / max_batch / tuning.kv_ceiling
    worst = max((snap.itl_p90_s or 0.0) / target, usage / tuning.kv_ceiling, full, queued)
    fb = _feedback_need(memory, snap, worst, tuning)
    feedback = fb is not None and fb > need
    if feedback and fb is not None:
        need = fb
        why = f"ITL p90 {snap.itl_p90_s or 0:.4f}s / KV {usage:.2f} / batch / queue past the limits; " + why
    itl = snap.itl_p90_s
    safe = (itl is None or itl <= tuning.down_sensitivity * target) and (snap.waiting_requests or 0.0) < 1.0
    note = "" if safe else f"ITL p90 {itl or 0:.4f}s is near the {target:.4f}s target or requests are queued"
    return _Proposal(need, why, safe_to_shrink=safe, shrink_note=note, breach=worst >= 1.0)


# --------------------------------------------------------------------------------------------------------------
# Stabilisation and limits


@dataclass(frozen=True, slots=True)
class _Final:
    replicas: int
    previous: int
    notes: tuple[str, ...]


def _previous(config: PolicyConfig, name: PoolName, state: PolicyState, obs: Observation) -> int:
    """What the pool was last told to have; before the first decision, what exists (ready + starting)."""
    remembered = state.memory(name).replicas
    if remembered is not None:
        return remembered
    snap = obs.pool(name)
    present = snap.ready_replicas + snap.starting_replicas
    return present if present > 0 else max(config.limits(name).spec_replicas, config.limits(name).min_replicas)


def _stabilized(
    config: PolicyConfig,
    name: PoolName,
    proposal: _Proposal,
    state: PolicyState,
    current: int,
    now: float,
    tuning: Tuning,
) -> tuple[int, str]:
    """HPA semantics on the recommendation history: up to the lowest recent "need", down to the highest."""
    assert proposal.need is not None
    history = (
        *state.memory(name).history,
        _recommendation(now, proposal.need, tuning),
    )
    up_to = min(r.up_to for r in history if r.at >= now - config.up_window_s)
    if proposal.settling and len(history) > 1:
        up_to = min(up_to, history[-2].up_to)  # undoing our own scale-down takes two evaluations in a row
    window = _down_window(config, state.memory(name), now, tuning)
    # Strictly inside the window: a recommendation exactly one window old has expired.
    down_to = max(r.down_to for r in history if r.at > now - window or r.at == now)
    if up_to > current:
        return min(up_to, current + config.up_step), "scale up"
    if down_to < current:
        if not proposal.safe_to_shrink:
            return current, f"scale-down deferred: {proposal.shrink_note}"
        first_seen = state.memory(name).observed_at
        if first_seen is None or now - first_seen < config.down_window_s:
            return current, "scale-down deferred: not observed for a whole stabilisation window yet"
        rise = _rising(history, now, config.down_window_s, tuning)
        if rise is not None:
            return current, f"scale-down deferred: the need is rising ({rise * 60:+.2f} replicas/min over the window)"
        return max(down_to, current - config.down_step), "scale down"
    return current, "steady"


def _recommendation(now: float, need: float, tuning: Tuning) -> Recommendation:
    return Recommendation(now, _ceil(need), _ceil(need / (1.0 - tuning.down_tolerance)), need)


def _rising(history: tuple[Recommendation, ...], now: float, window: float, tuning: Tuning) -> float | None:
    """The slope of the need over the window (replicas/s) when it is significantly positive, else None.

    A pool whose need has been climbing will need its replicas back: shrinking it now is the first half of a
    reversal (the morning of a diurnal load). Least squares over the window; it counts when it is significant
    (t >= rise_t) and material (at least rise_min replicas over the window)."""
    points = [(r.at - now, r.need) for r in history if r.at > now - window]
    n = len(points)
    if n < 4:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in points)
    if sxx <= 0:
        return None
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / sxx
    residual = sum((y - mean_y - slope * (t - mean_t)) ** 2 for t, y in points) / (n - 2)
    error = math.sqrt(residual / sxx)
    if slope * window < tuning.rise_min or slope < tuning.rise_t * error:
        return None
    return slope


def _down_window(config: PolicyConfig, memory: PoolMemory, now: float, tuning: Tuning) -> float:
    """The scale-down stabilisation window: the spec's, or Tuning.burst_hold_windows of it for as long after a
    burst."""
    held = config.down_window_s * tuning.burst_hold_windows
    if memory.burst_at is not None and now - memory.burst_at <= held:
        return max(config.down_window_s, held)
    return config.down_window_s


def _ceil(value: float) -> int:
    return math.ceil(value - 1e-9)


def _constrain(
    config: PolicyConfig,
    proposals: dict[PoolName, _Proposal],
    state: PolicyState,
    obs: Observation,
    now: float,
    tuning: Tuning,
) -> dict[PoolName, _Final]:
    notes: dict[PoolName, list[str]] = {name: [] for name in POOLS}
    wanted: dict[PoolName, int] = {}
    previous: dict[PoolName, int] = {}
    for name in POOLS:
        previous[name] = _previous(config, name, state, obs)
        proposal = proposals.get(name)
        if proposal is None or proposal.need is None:
            wanted[name] = previous[name]
            continue
        replicas, note = _stabilized(config, name, proposal, state, previous[name], now, tuning)
        notes[name].append(note)
        wanted[name] = replicas
    wanted = _clamp_pools(config, wanted, notes)
    wanted = _ratio_bounds(config, proposals, wanted, notes)
    wanted = _gpu_budget(config, proposals, wanted, notes)
    return {name: _Final(wanted[name], previous[name], tuple(notes[name])) for name in POOLS}


def _movable(config: PolicyConfig, proposals: dict[PoolName, _Proposal], name: PoolName) -> bool:
    proposal = proposals.get(name)
    return config.limits(name).scaled and proposal is not None and proposal.hold is None


def _clamp_pools(
    config: PolicyConfig, wanted: dict[PoolName, int], notes: dict[PoolName, list[str]]
) -> dict[PoolName, int]:
    out = dict(wanted)
    for name in POOLS:
        limits = config.limits(name)
        if not limits.scaled:
            continue
        clamped = min(max(out[name], limits.min_replicas), limits.max_replicas)
        if clamped != out[name]:
            bound = "maxReplicas" if clamped < out[name] else "minReplicas"
            notes[name].append(f"held at {bound} {clamped} (wanted {out[name]})")
        out[name] = clamped
    return out


def _ratio_bounds(
    config: PolicyConfig,
    proposals: dict[PoolName, _Proposal],
    wanted: dict[PoolName, int],
    notes: dict[PoolName, list[str]],
) -> dict[PoolName, int]:
    """Keep prefill/decode within [ratio.min, ratio.max], raising the short side first (SLOs over cost)."""
    p, d = wanted["prefill"], wanted["decode"]
    lo, hi = config.ratio_min, config.ratio_max
    if hi is not None and d > 0 and p > hi * d:
        p, d = _fix_ratio(config, proposals, short="decode", long="prefill", short_n=d, long_n=p, factor=1 / hi)
    if lo is not None and lo > 0 and d > 0 and p < lo * d:
        p, d = _fix_ratio(config, proposals, short="prefill", long="decode", short_n=p, long_n=d, factor=lo)
    out: dict[PoolName, int] = {"prefill": p, "decode": d}
    for name in POOLS:
        if out[name] != wanted[name]:
            notes[name].append(f"moved to {out[name]} to keep the P:D ratio within bounds")
    return out


def _fix_ratio(
    config: PolicyConfig,
    proposals: dict[PoolName, _Proposal],
    short: PoolName,
    long: PoolName,
    short_n: int,
    long_n: int,
    factor: float,
) -> tuple[int, int]:
    """short must reach ceil(long * factor); if it cannot move that far, long comes down instead."""
    needed = _ceil(long_n * factor)
    if _movable(config, proposals, short):
        short_n = min(needed, config.limits(short).max_replicas)
    if short_n < needed and _movable(config, proposals, long):
        long_n = max(math.floor(short_n / factor + 1e-9), config.limits(long).min_replicas)
    return (short_n, long_n) if short == "prefill" else (long_n, short_n)


def _gpu_budget(
    config: PolicyConfig,
    proposals: dict[PoolName, _Proposal],
    wanted: dict[PoolName, int],
    notes: dict[PoolName, list[str]],
) -> dict[PoolName, int]:
    """Remove replicas, one at a time, from the pool that the model says needs its replicas least."""
    if config.max_gpus is None:
        return wanted
    out = dict(wanted)

    def gpus() -> int:
        return sum(out[name] * config.limits(name).gpus_per_replica for name in POOLS)

    while gpus() > config.max_gpus:
        candidates = [
            name
            for name in POOLS
            if _movable(config, proposals, name) and out[name] > max(config.limits(name).min_replicas, 1)
        ]
        if not candidates:
            break

        def pressure(name: PoolName) -> float:
            need = proposals[name].need or 0.0
            return need / (out[name] - 1)

        victim = min(candidates, key=pressure)
        out[victim] -= 1
    for name in POOLS:
        if out[name] != wanted[name]:
            notes[name].append(f"cut to {out[name]} by the GPU budget of {config.max_gpus}")
    return out


# --------------------------------------------------------------------------------------------------------------
# Assembling the answer


def _pool_decision(
    name: PoolName, proposal: _Proposal, final: _Final, state: PolicyState, obs: Observation
) -> PoolDecision:
    if proposal.hold is not None:
        reason = f"holding {name} at {final.replicas}: {proposal.hold_message}"
        return PoolDecision(name, final.replicas, final.previous, None, reason, proposal.hold)
    verdict = ", ".join(final.notes) if final.notes else "steady"
    if final.replicas != final.previous:
        head = f"{name} {final.previous} -> {final.replicas}"
    else:
        head = f"{name} stays at {final.replicas}"
    snap = obs.pool(name)
    starting = f"; {snap.starting_replicas} starting" if snap.starting_replicas else ""
    reason = f"{head} ({verdict}): need {proposal.need or 0:.2f} replicas from {proposal.why}{starting}"
    return PoolDecision(name, final.replicas, final.previous, proposal.need, reason)


def _remember(
    state: PolicyState,
    name: PoolName,
    proposal: _Proposal,
    final: _Final,
    now: float,
    tuning: Tuning,
    config: PolicyConfig,
    observation: Observation,
) -> PolicyState:
    memory = state.memory(name)
    changed_at, direction = memory.changed_at, memory.direction
    if final.replicas != final.previous:
        changed_at, direction = now, (1 if final.replicas > final.previous else -1)
    history = memory.history
    observed_at, ready, burst_at, waiting = memory.observed_at, memory.ready, memory.burst_at, memory.waiting
    if final.replicas > final.previous and proposal.need is not None:
        jump = _ceil(proposal.need) >= max(final.previous + 2, tuning.burst_factor * final.previous)
        if (proposal.breach or jump) and not proposal.settling:
            burst_at = now
    if proposal.need is not None:
        keep_after = now - max(config.down_window_s * max(tuning.burst_hold_windows, 1.0), config.up_window_s)
        history = (*(r for r in history if r.at >= keep_after), _recommendation(now, proposal.need, tuning))
        observed_at = memory.observed_at if memory.observed_at is not None else now
        ready = observation.pool(name).ready_replicas
        waiting = observation.pool(name).waiting_requests
    return state.with_memory(
        name,
        PoolMemory(
            replicas=final.replicas,
            changed_at=changed_at,
            direction=direction,
            history=history,
            observed_at=observed_at,
            ready=ready,
            burst_at=burst_at,
            waiting=waiting,
        ),
    )


def _condition(decisions: Iterable[PoolDecision]) -> ScalingCondition:
    held = [d for d in decisions if d.hold is not None]
    if held:
        return ScalingCondition("False", held[0].hold or "", "; ".join(d.reason for d in held))
    return ScalingCondition("True", "Evaluated", "the scaler acted on fresh metrics for every scaled pool")
