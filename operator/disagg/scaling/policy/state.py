"""What the policy remembers between evaluations: small frozen records of numbers and tuples, so the shell can keep
them in memory or serialise them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from disagg.api.pool import PoolName

from .config import Tuning


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
    load: float | None = None
    """The pool's load then (prefill: computed prompt tokens/s; decode: generated tokens/s), for a load building up
    (Tuning.itl_backoff_rise)."""
    hold_to: int | None = None
    """`down_to` for the need of the load alone (Proposal.sustained; None: as `down_to`), what the burst hold keeps
    past the plain window (Tuning.burst_hold_sustained)."""
    requests: float | None = None
    """The pool's request rate then, to tell a load that builds up because outputs got longer from one that rose
    because more requests came (Tuning.itl_backoff_per_request_rise)."""


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
    bursts: tuple[float, ...] = ()
    """Times of the recent bursts (within Tuning.burst_memory_s), for how far apart they come."""
    floor: int = 0
    """Replicas the pool is not scaled below (Tuning.learn_floor): one more than a size it was caught short at
    right after our scale-down to it..."""
    floor_at: float | None = None
    """...learned then (it lapses after Tuning.burst_memory_s)..."""
    floor_load: float | None = None
    """...at this load (Tuning.learn_floor_load_share)."""
    load: float | None = None
    """The pool's load at the last evaluation (prefill: computed prompt tokens/s; decode: generated tokens/s)."""


@dataclass(frozen=True, slots=True)
class ItlFit:
    """Exponentially forgetting least-squares sums for ITL p90 = a + b * u + c * q, where u is the KV usage and q
    the running sequences per replica over the batch cap: one decode step costs a fixed part (weights), a part per
    KV token read and a part per sequence. `moments` holds the weighted sums of x_i * x_j and x_i * y over
    x = (1, u, q), in the order of `MOMENTS`."""

    moments: tuple[float, ...] = (0.0,) * 9
    at: float | None = None


@dataclass(frozen=True, slots=True)
class PolicyState:
    prefill: PoolMemory = field(default_factory=PoolMemory)
    decode: PoolMemory = field(default_factory=PoolMemory)
    prefill_capacity: float | None = None
    """Measured prompt tokens/s of one prefill replica while busy (smoothed)."""
    queue_factor: float | None = None
    itl_point: tuple[int, float, float] | None = None
    """Where decode runs: (ready replicas, sequences per ready replica, mean ITL), smoothed over the windows served
    by that many replicas."""
    itl_aim: float | None = None
    """Share of the ITL target decode is sized for (the fit's mean ITL), learned from the tokens over the target;
    None until learned (Tuning.itl_margin)."""
    """k of the prefill queueing model, learned from observed TTFT p90 (smoothed, clipped); None until learned."""
    itl_fit: ItlFit = field(default_factory=ItlFit)
    ttft_tail_over_at: float | None = None
    """When a prefill window last had its TTFT tail over Tuning.tail_high, settled or not
    (Tuning.queue_factor_calm_s)."""

    def memory(self, name: PoolName) -> PoolMemory:
        return self.prefill if name == "prefill" else self.decode

    def with_memory(self, name: PoolName, memory: PoolMemory) -> PolicyState:
        return replace(self, prefill=memory) if name == "prefill" else replace(self, decode=memory)


MOMENTS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2), (0, -1), (1, -1), (2, -1))
"""(i, j) of the sums in ItlFit.moments: x_i * x_j, or x_i * y when j is -1."""


def moments(x: tuple[float, float, float], y: float, weight: float) -> tuple[float, ...]:
    return tuple(weight * x[i] * (y if j < 0 else x[j]) for i, j in MOMENTS)


def stationary(previous: float | None, current: float | None, tuning: Tuning) -> bool:
    if previous is None or current is None:
        return False
    return abs(current - previous) <= tuning.stationary_change * max(previous, current, 1e-9)


def ewma(previous: float | None, sample: float, smoothing: float) -> float:
    return sample if previous is None else previous + smoothing * (sample - previous)


def recommendation(
    now: float,
    need: float,
    tuning: Tuning,
    load: float | None = None,
    requests: float | None = None,
    sustained: float | None = None,
) -> Recommendation:
    up_to, down_to = ceil_replicas(need), ceil_replicas(need / (1.0 - tuning.down_tolerance))
    hold_to = None if sustained is None else ceil_replicas(sustained / (1.0 - tuning.down_tolerance))
    return Recommendation(now, up_to, down_to, need, load, hold_to, requests)


def ceil_replicas(value: float) -> int:
    return math.ceil(value - 1e-9)


def rising(history: tuple[Recommendation, ...], now: float, window: float, tuning: Tuning) -> float | None:
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
