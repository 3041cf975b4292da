"""From proposals to replica counts: HPA-style stabilisation windows with the burst hold and the rising-need guard,
then min/max per pool, the P:D ratio bounds and the GPU budget."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from disagg.api.pool import PoolName
from disagg.scaling.snapshot import Observation

from .config import POOLS, PolicyConfig, Tuning
from .proposal import Proposal
from .state import PolicyState, PoolMemory, Recommendation, ceil_replicas, recommendation, rising


@dataclass(frozen=True, slots=True)
class Final:
    replicas: int
    previous: int
    notes: tuple[str, ...]


def previous_replicas(config: PolicyConfig, name: PoolName, state: PolicyState, obs: Observation) -> int:
    """What the pool was last told to have; before the first decision, what exists (ready + starting)."""
    remembered = state.memory(name).replicas
    if remembered is not None:
        return remembered
    snap = obs.pool(name)
    present = snap.ready_replicas + snap.starting_replicas
    return present if present > 0 else max(config.limits(name).spec_replicas, config.limits(name).min_replicas)


def stabilized(
    config: PolicyConfig,
    name: PoolName,
    proposal: Proposal,
    state: PolicyState,
    current: int,
    now: float,
    tuning: Tuning,
) -> tuple[int, str]:
    """HPA semantics on the recommendation history: up to the lowest recent "need", down to the highest."""
    assert proposal.need is not None
    history = (
        *state.memory(name).history,
        recommendation(now, proposal.need, tuning),
    )
    up_to = min(r.up_to for r in history if r.at >= now - config.up_window_s)
    forecast = forecast_need(history, now, tuning)
    if forecast is not None and not proposal.settling:
        up_to = max(up_to, ceil_replicas(forecast))
    if proposal.settling and len(history) > 1:
        up_to = min(up_to, history[-2].up_to)  # undoing our own scale-down takes two evaluations in a row
    window = down_window(config, state.memory(name), now, tuning)
    if tuning.burst_hold_shared:
        window = max(window, *(down_window(config, state.memory(other), now, tuning) for other in POOLS))
    # Strictly inside the window: a recommendation exactly one window old has expired.
    down_to = max(r.down_to for r in history if r.at > now - config.down_window_s or r.at == now)
    down_to = max(down_to, held_to(history, now, config.down_window_s, window, tuning))
    floor = learned_floor(state.memory(name), now, tuning, proposal.load)
    down_to = max(down_to, reserve(history, now, tuning), floor)
    # Like HPA's tolerance: a need within `up_tolerance` of the replicas there is noise in the load, not a shortage,
    # unless the SLO is already broken.
    within = proposal.need <= current * (1.0 + tuning.up_tolerance) and not proposal.breach
    if up_to > current and not within:
        return min(up_to, current + config.up_step), "scale up"
    if down_to < current:
        if not proposal.safe_to_shrink:
            return current, f"scale-down deferred: {proposal.shrink_note}"
        first_seen = state.memory(name).observed_at
        if first_seen is None or now - first_seen < config.down_window_s:
            return current, "scale-down deferred: not observed for a whole stabilisation window yet"
        rise = rising(history, now, config.down_window_s, tuning)
        if rise is not None:
            return current, f"scale-down deferred: the need is rising ({rise * 60:+.2f} replicas/min over the window)"
        return max(down_to, current - config.down_step), "scale down"
    if floor >= current and history[-1].down_to < current:
        return current, f"scale-down deferred: caught short at {floor - 1} replicas within the last hour"
    return current, "steady"


def held_to(history: tuple[Recommendation, ...], now: float, plain: float, window: float, tuning: Tuning) -> int:
    """What the burst hold keeps past the plain window: the highest recommendation there, or (with
    Tuning.burst_hold_sustained) the highest need of the load alone. The next burst needs the capacity its load
    needs; the feedback path's and the backlog's extra replicas drained the last one's queue, and held for the
    whole hold they kept a code assistant's prefill at 8 where its bursts need 4-5."""
    older = [r for r in history if now - window < r.at <= now - plain]
    if not older:
        return 0
    if not tuning.burst_hold_sustained:
        return max(r.down_to for r in older)
    return max(r.hold_to if r.hold_to is not None else r.down_to for r in older)


def reserve(history: tuple[Recommendation, ...], now: float, tuning: Tuning) -> int:
    """Replicas kept through lulls: the `reserve_quantile` of the need over the last `reserve_window_s` (0 when
    off). A pool that needed its burst capacity for more than the rest of that share of the recent past is likely
    to need it again within a start-up; one that needed it once is not held."""
    if tuning.reserve_quantile <= 0:
        return 0
    needs = sorted(r.need for r in history if r.at > now - tuning.reserve_window_s)
    if not needs:
        return 0
    return ceil_replicas(needs[min(int(tuning.reserve_quantile * len(needs)), len(needs) - 1)])


def learned_floor(memory: PoolMemory, now: float, tuning: Tuning, load: float | None = None) -> int:
    """The size the pool learned it cannot go below (Tuning.learn_floor), while that lesson is recent and (with
    Tuning.learn_floor_load_share) while the load is still near what it was taught at."""
    if not tuning.learn_floor or memory.floor_at is None or now - memory.floor_at > tuning.burst_memory_s:
        return 0
    share = tuning.learn_floor_load_share
    if share > 0 and memory.floor_load is not None and load is not None and load < share * memory.floor_load:
        return 0
    return memory.floor


def forecast_need(history: tuple[Recommendation, ...], now: float, tuning: Tuning) -> float | None:
    """The need one start-up ahead when it has been climbing significantly over the last minutes (a load that builds
    up, as decode's concurrency does after a switch to long outputs), else None. Scale-up only."""
    if tuning.forecast_horizon_s <= 0:
        return None
    slope = rising(history, now, tuning.forecast_window_s, tuning)
    if slope is None:
        return None
    return history[-1].need + slope * tuning.forecast_horizon_s


def down_window(config: PolicyConfig, memory: PoolMemory, now: float, tuning: Tuning) -> float:
    """The scale-down stabilisation window: the spec's, or the burst hold for as long after a burst."""
    held = burst_hold(config, memory, tuning)
    if memory.burst_at is not None and now - memory.burst_at <= held:
        return max(config.down_window_s, held)
    return config.down_window_s


def burst_hold(config: PolicyConfig, memory: PoolMemory, tuning: Tuning) -> float:
    """How long capacity bought in a burst is kept: Tuning.burst_hold_windows of the spec's window, or (adaptive)
    the recent bursts' typical gap, so the next one finds it still there, and nothing extra for a first burst."""
    window = config.down_window_s
    longest = window * tuning.burst_hold_windows
    if not tuning.burst_hold_adaptive:
        return longest
    gaps = sorted(b - a for a, b in itertools.pairwise(memory.bursts))
    if not gaps:
        return window
    gap = quantile(gaps, tuning.burst_gap_quantile)
    return min(max(tuning.burst_gap_factor * gap, window), max(longest, window))


def quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated between neighbours (0.5 of an even count: the middle two's
    mean)."""
    position = min(max(q, 0.0), 1.0) * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def constrain(
    config: PolicyConfig,
    proposals: dict[PoolName, Proposal],
    state: PolicyState,
    obs: Observation,
    now: float,
    tuning: Tuning,
) -> dict[PoolName, Final]:
    notes: dict[PoolName, list[str]] = {name: [] for name in POOLS}
    wanted: dict[PoolName, int] = {}
    previous: dict[PoolName, int] = {}
    for name in POOLS:
        previous[name] = previous_replicas(config, name, state, obs)
        proposal = proposals.get(name)
        if proposal is None or proposal.need is None:
            wanted[name] = previous[name]
            continue
        replicas, note = stabilized(config, name, proposal, state, previous[name], now, tuning)
        notes[name].append(note)
        wanted[name] = replicas
    wanted = _clamp_pools(config, wanted, notes)
    wanted = _ratio_bounds(config, proposals, wanted, notes)
    wanted = _gpu_budget(config, proposals, wanted, notes)
    return {name: Final(wanted[name], previous[name], tuple(notes[name])) for name in POOLS}


def _movable(config: PolicyConfig, proposals: dict[PoolName, Proposal], name: PoolName) -> bool:
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
    proposals: dict[PoolName, Proposal],
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
    proposals: dict[PoolName, Proposal],
    short: PoolName,
    long: PoolName,
    short_n: int,
    long_n: int,
    factor: float,
) -> tuple[int, int]:
    """short must reach ceil(long * factor); if it cannot move that far, long comes down instead."""
    needed = ceil_replicas(long_n * factor)
    if _movable(config, proposals, short):
        short_n = min(needed, config.limits(short).max_replicas)
    if short_n < needed and _movable(config, proposals, long):
        long_n = max(math.floor(short_n / factor + 1e-9), config.limits(long).min_replicas)
    return (short_n, long_n) if short == "prefill" else (long_n, short_n)


def _gpu_budget(
    config: PolicyConfig,
    proposals: dict[PoolName, Proposal],
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
