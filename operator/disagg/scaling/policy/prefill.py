"""The prefill model: measured capacity, a G/G/n queueing tail with a learned burstiness factor k, and the replica
count whose target utilisation keeps TTFT p90 within the target."""

from __future__ import annotations

import math
from dataclasses import replace

from disagg.scaling.snapshot import PoolSnapshot, share_above

from .config import PolicyConfig, Tuning
from .proposal import Proposal, feedback_need
from .state import PolicyState, PoolMemory, Recommendation, ewma, stationary


def learn_prefill(
    config: PolicyConfig, snap: PoolSnapshot, state: PolicyState, tuning: Tuning, decode_queue: float | None = None
) -> PolicyState:
    capacity = state.prefill_capacity
    if snap.prefill_tokens_per_busy_s is not None and snap.prefill_tokens_per_busy_s > 0:
        capacity = ewma(capacity, snap.prefill_tokens_per_busy_s, tuning.capacity_smoothing)
    state = replace(state, prefill_capacity=capacity)
    capacity = replica_capacity(config, state, tuning)
    # The queueing part of the observed TTFT p90 (minus the p90 service time) against the model's rho*S/(2(1-rho))
    # measures k at the current utilisation. Only in the range where the queue is both visible and finite.
    times = service_times(snap, capacity, tuning)
    demand = snap.uncached_prompt_token_rate
    if snap.ttft_p90_s is None or times is None or demand is None:
        return state
    rho = demand / (snap.ready_replicas * capacity)
    # Only from a stationary queue: not across a change in capacity, not near saturation (a growing backlog would
    # be read as burstiness and then over-provision every later burst).
    settled = snap.starting_replicas == 0 and state.prefill.ready == snap.ready_replicas
    if tuning.tail_control and snap.ttft_histogram is not None:
        return _learn_from_tail(config, snap, state, tuning, rho, settled, decode_queue)
    if not settled or not tuning.learn_min_utilization <= rho <= tuning.learn_max_utilization:
        return state
    unit = queue_wait(1.0, rho, snap.ready_replicas, times[0])
    budget = (config.ttft_target_s or 1.0) - times[1]
    if unit < tuning.learn_min_wait_share * budget * tuning.ttft_margin:
        return state
    wait = max(snap.ttft_p90_s - times[1], 0.0)
    sample = wait / unit
    sample = min(max(sample, tuning.queue_factor_min), tuning.queue_factor_max)
    rising = state.queue_factor is None or sample > state.queue_factor
    weight = tuning.correction_smoothing if rising else tuning.correction_decay
    return replace(state, queue_factor=ewma(state.queue_factor, sample, weight))


def _learn_from_tail(
    config: PolicyConfig,
    snap: PoolSnapshot,
    state: PolicyState,
    tuning: Tuning,
    rho: float,
    settled: bool,
    decode_queue: float | None,
) -> PolicyState:
    """k from the share of first tokens over the target: more careful at once when the tail is near the target,
    relaxed slowly when it is far under it on a pool busy enough for queueing to matter. Not while decode is
    queued (in P/D the first token waits for decode too, which more prefill headroom would not fix)."""
    target = config.ttft_target_s or 1.0
    share = share_above(snap.ttft_histogram, target)
    if share is not None and share > tuning.tail_high:
        state = replace(state, ttft_tail_over_at=snap.taken_at)
    steady = stationary(state.prefill.load, snap.uncached_prompt_token_rate, tuning)
    if share is None or not settled or not steady or (decode_queue is not None and decode_queue >= 1.0):
        return state
    k = learned_queue_factor(state, tuning)
    if share > tuning.tail_high:
        k = min(k * tuning.queue_factor_up, tuning.queue_factor_max)
    elif share < tuning.tail_low and rho >= tuning.learn_min_utilization and calm(state, snap, tuning):
        k = max(k * tuning.queue_factor_down, tuning.queue_factor_min)
    else:
        return state
    return replace(state, queue_factor=k)


def calm(state: PolicyState, snap: PoolSnapshot, tuning: Tuning) -> bool:
    """Whether no window of the last `queue_factor_calm_s` had its TTFT tail over `tail_high`, settled or not
    (Tuning.queue_factor_calm_s; always, when 0). k only rises on stationary windows, and on on-off traffic the
    windows whose tail breaks are the ones whose load just stepped: a calm stationary window between bursts then
    relaxed k, nothing raised it, and it sat at its floor."""
    over = state.ttft_tail_over_at
    return tuning.queue_factor_calm_s <= 0 or over is None or snap.taken_at - over >= tuning.queue_factor_calm_s


def replica_capacity(config: PolicyConfig, state: PolicyState, tuning: Tuning) -> float:
    if state.prefill_capacity is not None:
        return state.prefill_capacity
    return tuning.prefill_capacity_prior * config.prefill.gpus_per_replica


def service_times(snap: PoolSnapshot, capacity: float, tuning: Tuning) -> tuple[float, float] | None:
    """Mean and p90 prefill time of one prompt on an idle replica."""
    mean_prompt = snap.mean_prompt_tokens
    if mean_prompt is None:
        return None
    uncached = snap.uncached_share
    mean = max(mean_prompt * uncached, 1.0) / capacity
    if snap.prompt_tokens_p90 is None:
        return mean, mean * tuning.service_p90_factor
    return mean, max(snap.prompt_tokens_p90 * uncached / capacity, mean)


def learned_queue_factor(state: PolicyState, tuning: Tuning) -> float:
    return state.queue_factor if state.queue_factor is not None else tuning.queue_factor_prior


def arrival_dispersion(
    history: tuple[Recommendation, ...], snap: PoolSnapshot, interval_s: float, tuning: Tuning
) -> tuple[float, float] | None:
    """The arrivals' dispersion over the last `dispersion_window_s` (Tuning.dispersion_queue_factor): the mean
    squared change of the computed prompt tokens between consecutive windows, over twice the mean window's tokens
    times the mean computed prompt. For a renewal process that is about ca^2 + cs^2 (Kingman's burstiness: the
    count's index of dispersion plus the prompt lengths' squared coefficient of variation), 1-2 for Poisson
    arrivals. Consecutive differences, not the variance around the mean, so a trend adds little, and the largest
    change is left out, so one step of the level adds nothing. Returned with the mean computed prompt (tokens);
    None without enough consecutive windows or without traffic."""
    points = [(r.at, r.load, r.requests) for r in history if r.at > snap.taken_at - tuning.dispersion_window_s]
    points.append((snap.taken_at, snap.uncached_prompt_token_rate, snap.request_rate))
    tokens, requests, windows = 0.0, 0.0, 0
    changes: list[float] = []
    previous: tuple[float, float] | None = None
    for at, load, rate in points:
        if load is None or rate is None:
            previous = None
            continue
        window = load * interval_s
        tokens, requests, windows = tokens + window, requests + rate * interval_s, windows + 1
        if previous is not None and at - previous[0] <= 1.5 * interval_s:
            changes.append((window - previous[1]) ** 2)
        previous = (at, window)
    if len(changes) < tuning.dispersion_min_windows or tokens <= 0 or requests <= 0:
        return None
    # The largest change left out: one step of the level (a load step, a spike's first edge) is a new level, not
    # a clump; clumped arrivals change the load at many windows, and lose little by it.
    squares = sum(changes) - max(changes)
    mean_window, mean_prompt = tokens / windows, tokens / requests
    return squares / (len(changes) - 1) / 2.0 / (mean_window * mean_prompt), mean_prompt


def queue_wait(k: float, rho: float, replicas: int, mean_s: float) -> float:
    """p90 wait in front of `replicas` servers at utilisation rho: Sakasegawa's G/G/n approximation
    k * S * rho^(sqrt(2(n+1)) - 1) / (2 n (1 - rho)). At n = 1 it is the M/D/1 mean wait times k (Kingman's
    form); more replicas behind one router pool their queue, which waits less at the same utilisation."""
    exponent = math.sqrt(2.0 * (replicas + 1)) - 1.0
    return k * mean_s * math.pow(rho, exponent) / (2.0 * replicas * (1.0 - rho))


def target_utilization(target: float, mean_s: float, p90_s: float, k: float, replicas: int, tuning: Tuning) -> float:
    """Largest rho at which `replicas` servers keep p90 service + p90 queue wait within the TTFT budget."""
    budget = (target - p90_s) * tuning.ttft_margin
    if budget <= 0:
        return tuning.min_utilization
    lo, hi = 0.0, 0.999
    for _ in range(40):  # the wait grows monotonically with rho: bisect
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if queue_wait(k, mid, replicas, mean_s) <= budget else (lo, mid)
    return min(max(lo, tuning.min_utilization), tuning.max_utilization)


def prefill_need(
    demand: float, capacity: float, target: float, times: tuple[float, float], k: float, limit: int, tuning: Tuning
) -> tuple[float, float]:
    """Fewest replicas whose target utilisation covers the demand, as a continuous need, and that utilisation.

    The need is demand / (rho*(n) C) at the n found, but never n - 1 or less: n - 1 replicas were just found too
    few, even where rho*(n), higher than rho*(n - 1) because more servers pool their queue, would put the plain
    ratio under n - 1 (and ceil() would then keep the pool at the size that misses the target)."""
    rho = tuning.max_utilization
    replicas = 1
    for replicas in range(1, max(limit, 1) * 2 + 1):
        rho = target_utilization(target, times[0], times[1], k, replicas, tuning)
        if demand <= replicas * rho * capacity:
            break
    return max(demand / (rho * capacity), replicas - 1 + 1e-6), rho


def propose_prefill(
    config: PolicyConfig,
    snap: PoolSnapshot,
    state: PolicyState,
    memory: PoolMemory,
    tuning: Tuning,
    decode_queue: float | None,
) -> Proposal:
    target = config.ttft_target_s or 1.0
    capacity = replica_capacity(config, state, tuning)
    times = service_times(snap, capacity, tuning)
    demand = snap.uncached_prompt_token_rate or 0.0
    mean_prompt = snap.mean_prompt_tokens or 0.0
    # While replicas are starting, the queue is what they were ordered for: counting it again would double count.
    pending = snap.starting_replicas > 0
    backlog = 0.0 if pending else (snap.waiting_requests or 0.0) * mean_prompt / tuning.backlog_drain_s
    planned = demand + backlog
    k = learned_queue_factor(state, tuning)
    measured = arrival_dispersion(memory.history, snap, config.interval_s, tuning) if tuning.reads_dispersion else None
    dispersion, clump_prompt = measured if measured is not None else (None, 0.0)
    if dispersion is not None and tuning.dispersion_queue_factor > 0:
        k = min(max(k, tuning.dispersion_queue_factor * dispersion), tuning.queue_factor_max)
    if times is not None:
        need, rho = prefill_need(planned, capacity, target, times, k, config.prefill.max_replicas, tuning)
        sustained = prefill_need(demand, capacity, target, times, k, config.prefill.max_replicas, tuning)[0]
    else:
        rho = tuning.max_utilization
        need = planned / (rho * capacity)
        sustained = demand / (rho * capacity)
    why = (
        f"prefill {demand:.0f} tok/s (+{backlog:.0f} backlog) at capacity {capacity:.0f} tok/s/replica, "
        f"target utilisation {rho:.2f} (queueing factor {k:.1f}"
        + (")" if dispersion is None else f", arrivals' dispersion {dispersion:.1f})")
    )
    if dispersion is not None and tuning.clump_headroom > 0:
        # Headroom to clear a clump of arrivals within the target on top of the load (a batch arrival's wait, which
        # the window's mean utilisation does not show: bursty's base load broke the TTFT of 3 replicas at 35%).
        clump = tuning.clump_headroom * dispersion * clump_prompt / target
        clumped = (demand + clump) / capacity
        if clumped > need:
            need, sustained = clumped, max(sustained, clumped)
            why += f"; headroom for a clump of {clump * target:.0f} tokens within the target"
    fb = feedback_need(memory, snap, (snap.ttft_p90_s or 0.0) / target, tuning)
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
    return Proposal(need, why, safe_to_shrink=safe, shrink_note=note, breach=breach, sustained=min(sustained, need))
