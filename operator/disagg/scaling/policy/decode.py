"""The decode model: ITL p90 = a + b * KV usage + c * batch / maxNumSeqs fitted online, the batch per replica that
meets the ITL target, and Little's law on generated tokens with square-root headroom."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from disagg.scaling.snapshot import PoolSnapshot, share_above

from .config import PolicyConfig, Tuning
from .proposal import Proposal, feedback_need
from .state import MOMENTS, ItlFit, PolicyState, PoolMemory, Recommendation, moments, stationary


def fit_signal(snap: PoolSnapshot, tuning: Tuning) -> float | None:
    """What the ITL fit learns from: the exact mean (histogram sum / count) where the source has it. vLLM's ITL
    buckets are 10, 25, 50, 75 ms...: a p90 inside a bucket is a linear interpolation, which between 25 and 50 ms
    reads a true 28 ms as about 45 ms, and a fit on it learns an idle ITL above its own target."""
    if tuning.itl_fit_on_mean and snap.itl_mean_s is not None:
        return snap.itl_mean_s
    return snap.itl_p90_s


def queued_for_slots(snap: PoolSnapshot, config: PolicyConfig, tuning: Tuning) -> bool:
    """Whether decode's waiting requests are a shortage of slots: at least `decode_queue_share` of the running batch
    (and `feedback_min_queue`), on a pool with less room left than `decode_queue_room` of its KV ceiling and its
    batch cap. With room for as many sequences again, a waiting request is one whose KV is still arriving from
    prefill (vLLM counts those as waiting): more decode replicas do not make the transfer faster, and with short
    answers they are a large share of the running batch."""
    running = snap.running_requests or 0.0
    waiting = snap.waiting_requests or 0.0
    if waiting < max(tuning.feedback_min_queue, tuning.decode_queue_share * running):
        return False
    room = tuning.decode_queue_room
    if room <= 0:
        return True
    per_replica = running / max(snap.ready_replicas, 1)
    usage = snap.kv_cache_usage
    return per_replica >= room * batch_cap(config, tuning) or (usage is None or usage >= room * tuning.kv_ceiling)


def overloaded(snap: PoolSnapshot, config: PolicyConfig, tuning: Tuning) -> bool:
    """Requests queued for a decode slot or KV past the ceiling: the window shows stalls (preemption, admission),
    not the cost of a step, and a fit on it learns a per-sequence cost several times too high."""
    running = snap.running_requests or 0.0
    queued = queued_for_slots(snap, config, tuning)
    full = running / max(snap.ready_replicas, 1) >= tuning.kv_ceiling * batch_cap(config, tuning)
    return queued or full or (snap.kv_cache_usage or 0.0) > tuning.kv_ceiling


def learn_decode(
    config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, now: float, tuning: Tuning
) -> PolicyState:
    itl = fit_signal(snap, tuning)
    if itl is None or snap.kv_cache_usage is None or not snap.running_requests:
        return state
    if tuning.itl_fit_skips_overload and overloaded(snap, config, tuning):
        return state
    state = _learn_aim(config, snap, state, tuning, itl)
    # A window straddling a change of the ready count mixes two pool sizes: it does not say where either runs.
    if state.decode.ready == snap.ready_replicas:
        batch, previous = snap.running_requests / snap.ready_replicas, state.itl_point
        if previous is not None and previous[0] == snap.ready_replicas:
            w = tuning.itl_point_smoothing
            point = (
                snap.ready_replicas,
                previous[1] + w * (batch - previous[1]),
                previous[2] + w * (itl - previous[2]),
            )
        else:
            point = (snap.ready_replicas, batch, itl)
        state = replace(state, itl_point=point)
    fit = state.itl_fit
    decay = 1.0 if fit.at is None else 0.5 ** (max(now - fit.at, 0.0) / tuning.itl_fit_half_life_s)
    x = (1.0, snap.kv_cache_usage, snap.running_requests / snap.ready_replicas / batch_cap(config, tuning))
    sample = moments(x, itl, 1.0)
    return replace(
        state,
        itl_fit=ItlFit(moments=tuple(m * decay + v for m, v in zip(fit.moments, sample, strict=True)), at=now),
    )


def itl_aim(state: PolicyState, tuning: Tuning) -> float:
    return state.itl_aim if state.itl_aim is not None else tuning.itl_margin


def aimed_itl(target: float, aim: float, idle: float, tuning: Tuning) -> float:
    """The ITL decode is sized for: `aim` of the target, or of what it leaves above the idle ITL."""
    if not tuning.itl_margin_above_idle:
        return aim * target
    floor = min(max(idle, 0.0), tuning.itl_idle_cap * target)
    return floor + aim * (target - floor)


def building_up(memory: PoolMemory, snap: PoolSnapshot, tuning: Tuning) -> bool:
    """Whether the generated-token rate is `itl_backoff_rise` above its median over the last
    `itl_backoff_window_s` (a load that builds up for a whole request duration, as after a switch to long outputs)
    and, with `itl_backoff_per_request_rise`, the tokens per request rose too (`longer_outputs`): the aim above idle
    then backs off to the careful one (Tuning.itl_backoff_rise). On the load, not the need: the need moves with the
    aim itself, and its noise on a steady load read as a climb. Against the requests, because more requests of the
    same length reach their new concurrency within one request duration, inside a start-up when outputs are short;
    it is longer outputs whose concurrency keeps growing for minutes."""
    rate = snap.generation_token_rate
    if not tuning.itl_margin_above_idle or tuning.itl_backoff_rise <= 0 or rate is None:
        return False
    since = snap.taken_at - tuning.itl_backoff_window_s
    recent = [r for r in memory.history if r.at > since]
    loads = [r.load for r in recent if r.load is not None]
    if len(loads) < 4 or rate < (1.0 + tuning.itl_backoff_rise) * statistics.median(loads):
        return False
    if tuning.itl_backoff_per_request_rise <= 0:
        return True
    return longer_outputs(recent, snap, tuning)


def longer_outputs(recent: list[Recommendation], snap: PoolSnapshot, tuning: Tuning) -> bool:
    """Whether the generated tokens per request over the last `itl_backoff_request_window_s` (this window included)
    are `itl_backoff_per_request_rise` above those over all of `recent` and this window. Ratios of sums over the
    same windows: one window's count of clumped arrivals is noisy, and the tokens of more requests of the same
    length follow them within a request duration, so a spike of requests reads as fewer tokens per request, not
    more. True when the source gives no request rate (nothing then says the outputs did not get longer) or no
    request came lately."""
    now = (snap.taken_at, snap.generation_token_rate, snap.request_rate)
    points = [(r.at, r.load, r.requests) for r in recent] + [now]
    known = [(at, g, q) for at, g, q in points if g is not None and q is not None]
    if snap.request_rate is None or not known:
        return True
    since = snap.taken_at - tuning.itl_backoff_request_window_s
    lately = [(g, q) for at, g, q in known if at > since]
    tokens, requests = sum(g for g, _ in lately), sum(q for _, q in lately)
    all_tokens, all_requests = sum(g for _, g, _ in known), sum(q for _, _, q in known)
    if requests <= 0:
        return True
    if all_tokens <= 0:
        return False
    return tokens / requests >= (1.0 + tuning.itl_backoff_per_request_rise) * all_tokens / all_requests


def _learn_aim(config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, tuning: Tuning, itl: float) -> PolicyState:
    """The aim from the share of tokens over the target: lower at once when the tail nears the target (bursty
    arrivals swing the batch within a window, so the p90 sits further above the mean), higher slowly when the pool
    runs near its aim with the tail far under the target."""
    target = config.itl_target_s or 0.05
    share = share_above(snap.itl_histogram, target) if tuning.tail_control else None
    settled = snap.starting_replicas == 0 and state.decode.ready == snap.ready_replicas
    steady = stationary(state.decode.load, snap.generation_token_rate, tuning)
    if share is None or not settled or not steady:
        return state
    aim = itl_aim(state, tuning)
    if share > tuning.tail_high:
        aim = max(aim * tuning.itl_aim_down, tuning.itl_aim_min)
    elif share < tuning.tail_low and itl >= 0.9 * aimed_itl(target, aim, itl_model(config, state, tuning).idle, tuning):
        aim = min(aim * tuning.itl_aim_up, tuning.itl_aim_max)
    else:
        return state
    return replace(state, itl_aim=aim)


def batch_cap(config: PolicyConfig, tuning: Tuning) -> float:
    return float(config.decode_max_batch or tuning.max_batch)


IDLE_SHARE_MAX = 0.85


@dataclass(frozen=True, slots=True)
class ItlModel:
    """ITL p90 = idle + per_usage * KV usage + per_batch * (sequences per replica / batch cap)."""

    idle: float
    per_usage: float
    per_batch: float

    def at(self, usage: float, batch_share: float) -> float:
        return self.idle + self.per_usage * usage + self.per_batch * batch_share

    def per_sequence(self, usage_per_sequence: float, max_batch: float) -> float:
        """What one more sequence adds to a step: its KV reads and its own work."""
        return self.per_usage * usage_per_sequence + self.per_batch / max_batch

    def sequences_at(
        self,
        itl: float,
        usage_per_sequence: float,
        max_batch: float,
        anchor: tuple[float, float] | None = None,
    ) -> float:
        """Sequences one replica runs at this ITL, when each holds `usage_per_sequence` of its KV cache.

        With an anchor (where the pool runs: sequences per replica and the mean ITL they get), along the secant
        from the fit's idle ITL through that point. One workload's points lie close together, and noise in the
        measured batch flattens a least-squares slope and lifts its intercept (a third of the true slope and an
        idle 10 ms high: one replica where two were needed, and a 2 <-> 1 flap). Through the measured point the
        error the idle estimate makes shrinks as the pool nears its aim. The idle is held under IDLE_SHARE_MAX of
        the measured ITL, so that a fit idle close to it does not turn noise into a tiny batch."""
        if anchor is not None:
            batch_now, itl_now = anchor
            idle = min(self.idle, IDLE_SHARE_MAX * itl_now)
            if batch_now > 0 and itl_now > idle:
                return max(batch_now * (itl - idle) / (itl_now - idle), 0.0)
        slope = max(self.per_sequence(usage_per_sequence, max_batch), 1e-12)
        return max(itl - self.idle, 0.0) / slope


def itl_model(config: PolicyConfig, state: PolicyState, tuning: Tuning) -> ItlModel:
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
        for k, v in enumerate(moments((1.0, u, q), y, tuning.itl_prior_weight)):
            sums[k] += v
    m = {key: sums[k] for k, key in enumerate(MOMENTS)}

    def gram(i: int, j: int) -> float:
        return m[(min(i, j), max(i, j))]

    # ITL does not fall as load grows: a coefficient the data drives below its floor is pinned there and the
    # others refitted. Floors: a quarter of the prior slope for KV reads, zero for the per-sequence part.
    floors = {1: 0.25 * per_usage, 2: 0.0}
    pinned: dict[int, float] = {}
    for _ in range(3):
        free = [i for i in range(3) if i not in pinned]
        rhs = [m[(i, -1)] - sum(gram(i, j) * v for j, v in pinned.items()) for i in free]
        solved = solve([[gram(i, j) for j in free] for i in free], rhs)
        coefficients = dict(zip(free, solved, strict=True)) if solved is not None else {0: idle, 1: per_usage, 2: 0.0}
        coefficients.update(pinned)
        low = [i for i, floor in floors.items() if i not in pinned and coefficients[i] < floor]
        if not low:
            break
        pinned[low[0]] = floors[low[0]]
    return ItlModel(max(coefficients[0], 0.0), coefficients[1], coefficients[2])


def solve(a: list[list[float]], b: list[float]) -> list[float] | None:
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


def propose_decode(
    config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, memory: PoolMemory, tuning: Tuning
) -> Proposal:
    """Little's law on generated tokens: the rate is the same whatever the replica count, unlike KV usage or
    concurrency, which grow when fewer replicas make every token slower."""
    target = config.itl_target_s or 0.05
    usage, running, rate = snap.kv_cache_usage, snap.running_requests or 0.0, snap.generation_token_rate
    if usage is None or rate is None or running < 1.0:
        # Nothing to measure the cost of a sequence on (idle or unknown): size by the floor of one busy replica.
        current = memory.replicas if memory.replicas is not None else snap.ready_replicas + snap.starting_replicas
        idle = usage is not None and rate is not None and rate <= 0.0
        need = 0.0 if idle else float(current)
        return Proposal(need, "decode idle" if idle else "decode load unknown; holding the current size")
    usage_per_sequence = max(usage * snap.ready_replicas / running, 1e-6)
    model = itl_model(config, state, tuning)
    backoff = building_up(memory, snap, tuning)
    itl_at_target = aimed_itl(target, itl_aim(state, tuning), model.idle, tuning)
    if backoff:
        careful = aimed_itl(target, itl_aim(state, tuning), model.idle, replace(tuning, itl_margin_above_idle=False))
        room = aimed_itl(target, tuning.itl_backoff_room_share, model.idle, tuning)
        itl_at_target = room if tuning.itl_backoff_room_share > 0 else careful
    max_batch = batch_cap(config, tuning)
    signal = fit_signal(snap, tuning)
    # Only from a window served by the replicas ready now: across a change, the batch per ready replica and the ITL
    # the window measured belong to different pool sizes.
    settled = memory.ready == snap.ready_replicas
    anchored = tuning.itl_anchor and settled and signal is not None and not overloaded(snap, config, tuning)
    point = state.itl_point
    anchor = (point[1], point[2]) if anchored and point is not None and point[0] == snap.ready_replicas else None
    if anchor is not None and anchor[0] < tuning.itl_anchor_min_batch:
        anchor = None
    batch = min(
        model.sequences_at(itl_at_target, usage_per_sequence, max_batch, anchor),
        tuning.kv_ceiling / usage_per_sequence,
        max_batch,
    )
    batch = max(batch, 1.0)
    # Sequences waiting for a decode slot need one too (Little's law only counts those being served).
    waiting = snap.waiting_requests or 0.0
    concurrency = rate * itl_at_target + waiting
    headroom = 1.0 + tuning.concurrency_z / math.sqrt(max(concurrency, 1.0))
    need = concurrency * headroom / batch
    sustained = need
    why = ("load building up, careful aim; " if backoff else "") + (
        f"decode {rate:.0f} tok/s; at ITL {itl_at_target * 1e3:.1f}ms that is {concurrency:.0f} sequences, "
        f"{batch:.0f} per replica (fit {model.idle * 1e3:.1f}ms + {model.per_usage * 1e3:.1f}ms*usage + "
        f"{model.per_batch * 1e3:.1f}ms*batch/{max_batch:.0f}, {usage_per_sequence:.4f} usage per sequence)"
    )
    # A few sequences waiting a moment for their KV transfer are not a shortage; a queue this share of the batch is.
    material = queued_for_slots(snap, config, tuning)
    queued = (running + waiting) / running if material else 0.0
    # A batch near maxNumSeqs has no slot left for the next arrivals, whatever the ITL says yet.
    full = running / snap.ready_replicas / max_batch / tuning.kv_ceiling
    worst = max((snap.itl_p90_s or 0.0) / target, usage / tuning.kv_ceiling, full, queued)
    fb = feedback_need(memory, snap, worst, tuning)
    feedback = fb is not None and fb > need
    if feedback and fb is not None:
        need = fb
        why = f"ITL p90 {snap.itl_p90_s or 0:.4f}s / KV {usage:.2f} / batch / queue past the limits; " + why
    # Near the target by the fit's own signal (the mean where there is one: an interpolated p90 reads high) and not
    # over it by the p90 (exact at the target when the target is a bucket bound).
    itl = fit_signal(snap, tuning)
    over = (snap.itl_p90_s or 0.0) >= target
    safe = (itl is None or itl <= tuning.down_sensitivity * target) and not over
    if tuning.decode_queue_room > 0:  # transfers under way do not stop the survivors from absorbing the load
        safe = safe and not queued_for_slots(snap, config, tuning)
    else:
        safe = safe and (snap.waiting_requests or 0.0) < 1.0
    note = "" if safe else f"ITL {itl or 0:.4f}s is near the {target:.4f}s target or requests are queued"
    return Proposal(need, why, safe_to_shrink=safe, shrink_note=note, breach=worst >= 1.0, sustained=sustained)
