"""The entry point: learn from the observation, propose per pool, constrain, and remember. Also the output types."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from disagg.api.pool import PoolName
from disagg.scaling.snapshot import Observation, PoolSnapshot

from .config import DEFAULT_TUNING, POOLS, PolicyConfig, Tuning
from .decode import learn_decode, propose_decode, queued_for_slots
from .limits import Final, constrain
from .prefill import learn_prefill, propose_prefill
from .proposal import HoldReason, Proposal, hold_reason, trusted
from .state import PolicyState, PoolMemory, ceil_replicas, recommendation


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


def decide(
    config: PolicyConfig,
    observation: Observation,
    state: PolicyState | None,
    now: float,
    tuning: Tuning = DEFAULT_TUNING,
) -> Decision:
    """One evaluation. Call every `config.interval_s` with fresh snapshots and the state returned last time; build
    `config` once per spec with `config_from_spec`."""
    state = _learn(config, observation, state or PolicyState(), now, tuning)
    proposals: dict[PoolName, Proposal] = {}
    for name in POOLS:
        if config.limits(name).scaled:
            proposals[name] = _propose(config, observation, name, state, now, tuning)
    final = constrain(config, proposals, state, observation, now, tuning)
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


def _learn(config: PolicyConfig, obs: Observation, state: PolicyState, now: float, tuning: Tuning) -> PolicyState:
    if trusted(config, obs.prefill, now, tuning):
        state = learn_prefill(config, obs.prefill, state, tuning, decode_queue(config, obs, now, tuning))
    if trusted(config, obs.decode, now, tuning):
        state = learn_decode(config, obs.decode, state, now, tuning)
    return state


def decode_queue(config: PolicyConfig, obs: Observation, now: float, tuning: Tuning) -> float | None:
    """Decode's queue as prefill reads it (a first token that waits for a decode slot is not prefill's doing): the
    waiting requests while they are a shortage of slots, 0 while they are KV transfers under way (Tuning.
    decode_queue_room), None when decode's metrics cannot be trusted."""
    decode = obs.decode
    if not trusted(config, decode, now, tuning):
        return None
    return decode.waiting_requests if queued_for_slots(decode, config, tuning) or tuning.decode_queue_room <= 0 else 0.0


def _propose(
    config: PolicyConfig, observation: Observation, name: PoolName, state: PolicyState, now: float, tuning: Tuning
) -> Proposal:
    snap = observation.pool(name)
    hold = hold_reason(config, snap, now, tuning)
    if hold is not None:
        return Proposal(need=None, why="", hold=hold[0], hold_message=hold[1])
    memory = state.memory(snap.pool)
    if snap.pool == "prefill":
        proposal = propose_prefill(config, snap, state, memory, tuning, decode_queue(config, observation, now, tuning))
    else:
        proposal = propose_decode(config, snap, state, memory, tuning)
    # A replica we removed just left: its share of the traffic lands on survivors whose prefix caches do not hold it
    # yet, so uncached work and latency jump for about one window. Not evidence that the scale-down was wrong.
    settling = memory.direction < 0 and memory.ready is not None and snap.ready_replicas < memory.ready
    return replace(proposal, settling=settling, load=pool_load(snap))


def pool_load(snap: PoolSnapshot) -> float | None:
    """What the pool's model sizes it by: computed prompt tokens/s for prefill, generated tokens/s for decode."""
    return snap.uncached_prompt_token_rate if snap.pool == "prefill" else snap.generation_token_rate


def _pool_decision(
    name: PoolName, proposal: Proposal, final: Final, state: PolicyState, obs: Observation
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
    proposal: Proposal,
    final: Final,
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
    bursts, load = memory.bursts, memory.load
    floor, floor_at, floor_load = memory.floor, memory.floor_at, memory.floor_load
    if final.replicas > final.previous and proposal.need is not None:
        jump = ceil_replicas(proposal.need) >= max(final.previous + 2, tuning.burst_factor * final.previous)
        if (proposal.breach or jump) and not proposal.settling:
            episode = tuning.burst_episode_windows * config.down_window_s
            if burst_at is None or now - burst_at > episode:  # else the same spike caught short again
                bursts = (*(b for b in bursts if b >= now - tuning.burst_memory_s), now)
            burst_at = now
        # Caught short within a window of our own scale-down: the size it came down to is too small.
        since_down = now - (memory.changed_at or -math.inf)
        came_down = memory.direction < 0 and since_down <= tuning.learn_floor_windows * config.down_window_s
        short = proposal.breach or name in tuning.learn_floor_any.split(",")
        if tuning.learn_floor and short and not proposal.settling and came_down:
            floor, floor_at, floor_load = final.previous + 1, now, proposal.load
    if proposal.need is not None:
        reserve_s = tuning.reserve_window_s if tuning.reserve_quantile > 0 else 0.0
        dispersion_s = tuning.dispersion_window_s if tuning.reads_dispersion else 0.0
        keep_after = now - max(
            config.down_window_s * max(tuning.burst_hold_windows, 1.0), config.up_window_s, reserve_s, dispersion_s
        )
        snap = observation.pool(name)
        load = pool_load(snap)
        latest = recommendation(now, proposal.need, tuning, load, snap.request_rate, proposal.sustained)
        history = (*(r for r in history if r.at >= keep_after), latest)
        observed_at = memory.observed_at if memory.observed_at is not None else now
        ready = snap.ready_replicas
        waiting = snap.waiting_requests
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
            bursts=bursts,
            floor=floor,
            floor_at=floor_at,
            floor_load=floor_load,
            load=load,
            waiting=waiting,
        ),
    )


def _condition(decisions: Iterable[PoolDecision]) -> ScalingCondition:
    held = [d for d in decisions if d.hold is not None]
    if held:
        return ScalingCondition("False", held[0].hold or "", "; ".join(d.reason for d in held))
    return ScalingCondition("True", "Evaluated", "the scaler acted on fresh metrics for every scaled pool")
