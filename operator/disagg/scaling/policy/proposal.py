"""What one pool's model proposes before stabilisation and limits, and the checks every pool shares: when metrics
cannot be trusted (hold) and the proportional feedback path for an SLO already broken."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from disagg.scaling.snapshot import MetricsHealth, PoolSnapshot

from .config import PolicyConfig, Tuning
from .state import PoolMemory

HoldReason = Literal["MetricsMissing", "MetricsStale", "MetricsPartial", "NoReadyReplicas", "NoSloTarget"]


@dataclass(frozen=True, slots=True)
class Proposal:
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
    load: float | None = None
    """The pool's load in this window (prefill: computed prompt tokens/s; decode: generated tokens/s)."""
    sustained: float | None = None
    """The need of the load alone: without the feedback path and the backlog term (None: the same as `need`). What
    a burst hold keeps for the next burst (Tuning.burst_hold_sustained); the rest drained the last one's queue."""


def stale(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> bool:
    return now - snap.taken_at > tuning.stale_after_intervals * config.interval_s


def trusted(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> bool:
    return snap.usable and snap.ready_replicas > 0 and not stale(config, snap, now, tuning)


def hold_reason(config: PolicyConfig, snap: PoolSnapshot, now: float, tuning: Tuning) -> tuple[HoldReason, str] | None:
    target = config.ttft_target_s if snap.pool == "prefill" else config.itl_target_s
    if target is None:
        return "NoSloTarget", f"no {'ttftP90' if snap.pool == 'prefill' else 'itlP90'} target to size {snap.pool} by"
    detail = f": {snap.health_reason}" if snap.health_reason else ""
    if snap.health is MetricsHealth.MISSING or snap.window_s <= 0:
        return "MetricsMissing", f"{snap.pool} metrics missing{detail}"
    if snap.health is MetricsHealth.PARTIAL:
        return "MetricsPartial", f"{snap.pool} metrics incomplete{detail}"
    if snap.health is MetricsHealth.STALE or stale(config, snap, now, tuning):
        return "MetricsStale", f"{snap.pool} metrics are {now - snap.taken_at:.0f}s old{detail}"
    if snap.ready_replicas <= 0:
        return "NoReadyReplicas", f"no ready {snap.pool} replica to measure load on"
    return None


def feedback_need(memory: PoolMemory, snap: PoolSnapshot, ratio: float, tuning: Tuning) -> float | None:
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
