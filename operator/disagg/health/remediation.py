"""What to do about failing pairs (pure): replace an engine that serves nothing, drain the other failing pairs.

The failure this targets: one engine restarts and its peers keep transfer state about its previous incarnation (a
NIXL agent, UCX endpoints, a Mooncake engine id), so every pair through the restarted engine fails while every pod
reports Ready. The peers' stale state is keyed by the restarted engine's identity (its KV engine id, which the
operator derives from the pod name). So the cheapest fix is not to restart every peer (each of them still serves its
other pairs) but to give the restarted engine a new identity: delete its pod, and its workload creates a new pod,
with a new name and address, that every peer handshakes with afresh.

- An engine *serves nothing* when every routable pair through it fails, or, for a restarted engine waiting to be
  admitted again under the serving gate, when every pair through it fails. Among those, the one that (re)started most
  recently is replaced: that is the engine the others know stale state about. None while a rollout of the pairing
  revision runs or a pool is short of running engines (`replacement_hold`). At most one pod per cooldown, and the
  cooldown doubles with every replacement that did not bring Serving back (up to an hour), so a failure that
  replacement cannot fix (a broken network path) costs one pod every hour at most.
- Other failing pairs (both engines still serve elsewhere) are drained: the frontend stops choosing them. A
  drained pair keeps being probed and is undrained once it passes. The last routable pairs are never drained:
  that would turn failing requests into 503s and fix nothing.
- `Report` does neither and says what it would have done; `Drain` never deletes pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from disagg.api.serving import RemediationAction
from disagg.names import PoolName

from .pods import EnginePod
from .verdict import CheckState, FailingPair, PairId, Verdict

MAX_COOLDOWN_SECONDS = 3600.0


@dataclass(frozen=True)
class Memory:
    """What remediation remembers between rounds."""

    last_replacement: float | None = None
    """Wall-clock seconds of the last pod replacement."""
    unrecovered: int = 0
    """Replacements since Serving was last True."""


@dataclass(frozen=True)
class Plan:
    replace: EnginePod | None = None
    replace_reason: str = ""
    drain: tuple[PairId, ...] = ()
    undrain: tuple[PairId, ...] = ()
    held: tuple[str, ...] = ()
    """What was not done and why (Report, rate limit), for the event."""
    memory: Memory = field(default_factory=Memory)
    state: CheckState | None = None
    """The check state with drains marked; None when unchanged."""


def memory_status(memory: Memory) -> dict[str, Any] | None:
    """The cooldown's inputs for `status.serving.replacements`, so a new leader (or this operator after a restart)
    keeps the rate limit the previous one was under instead of replacing a pod at once; None when there is none."""
    if memory.last_replacement is None and memory.unrecovered == 0:
        return None
    out: dict[str, Any] = {"unrecovered": memory.unrecovered}
    if memory.last_replacement is not None:
        moment = datetime.fromtimestamp(memory.last_replacement, UTC)
        out["lastReplacementTime"] = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return out


def memory_from_status(recorded: object) -> Memory:
    """`memory_status` read back; what cannot be read counts as no replacement (the check then acts as on its first
    round: one pod, then the cooldown)."""
    if not isinstance(recorded, Mapping):
        return Memory()
    unrecovered = recorded.get("unrecovered")
    # bool is an int subclass; True is not a count.
    count = unrecovered if isinstance(unrecovered, int) and type(unrecovered) is not bool and unrecovered > 0 else 0
    last: float | None = None
    text = recorded.get("lastReplacementTime")
    if isinstance(text, str):
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            last = moment.timestamp()
    return Memory(last, count)


def effective_cooldown(cooldown: float, unrecovered: int) -> float:
    return float(min(cooldown * 2.0**unrecovered, max(cooldown, MAX_COOLDOWN_SECONDS)))


def plan_remediation(
    action: RemediationAction,
    verdict: Verdict,
    state: CheckState,
    engines: Iterable[EnginePod],
    memory: Memory,
    now: float,
    cooldown: float,
    desired: Mapping[PoolName, int] | None = None,
) -> Plan:
    """`desired`: each pool's replica count as asked now (the spec's or the autoscaler's)."""
    engines = list(engines)
    pods = {pod.name: pod for pod in engines}
    if verdict.status == "True" and not (
        verdict.failing or verdict.suspect or verdict.failing_candidates or verdict.suspect_candidates
    ):
        # Serving is back only when nothing failed this round: a pair that failed once is not yet counted as
        # failing, and after a takeover every streak starts at zero again (D160).
        memory = replace(memory, unrecovered=0)
    # Drained pairs that pass again go back into rotation (whatever the action: drains are ours to lift).
    undrain = tuple(key for key, record in sorted(state.pairs.items()) if record.drained and record.failures == 0)
    failing = [f for f in verdict.failing if f.pair.prefill in pods and f.pair.decode in pods]
    returning = [f for f in verdict.failing_candidates if f.pair.prefill in pods and f.pair.decode in pods]
    dead = _serving_nothing(state, failing, pods) + _returning_serving_nothing(state, returning, pods)
    if not failing and not dead:
        return Plan(undrain=undrain, memory=memory, state=_marked(state, (), undrain) if undrain else None)

    held: list[str] = []
    replaced: EnginePod | None = None
    reason = ""
    if dead:
        victim = max(dead, key=lambda pod: (pod.started or pod.created, pod.created, pod.name))
        pairs = [f for f in failing + returning if victim.name in (f.pair.prefill, f.pair.decode)]
        reason = (
            f"every pair through {victim.role} {victim.name} fails ({_pairs(pairs)}); it (re)started most recently "
            f"(restarts={victim.restarts}), so its peers may hold transfer state about its previous incarnation: "
            "a new pod gets a new identity they handshake with afresh"
        )
        wait = effective_cooldown(cooldown, memory.unrecovered)
        busy = replacement_hold(engines, desired or {})
        if action != "Recreate":
            held.append(f"would replace pod {victim.name}: {reason} (remediation.action is {action})")
        elif busy:
            held.append(f"would replace pod {victim.name} but {busy}: {reason}")
        elif memory.last_replacement is not None and now - memory.last_replacement < wait:
            left = wait - (now - memory.last_replacement)
            held.append(f"would replace pod {victim.name} but the cooldown has {left:.0f} s left: {reason}")
        else:
            replaced = victim
            memory = Memory(now, memory.unrecovered + 1)
    covered = {replaced.name} if replaced else set()
    to_drain = tuple(
        f.pair
        for f in failing
        if not f.record.drained and f.pair.prefill not in covered and f.pair.decode not in covered
    )
    healthy = verdict.pairs - len(verdict.failing)
    drain: tuple[PairId, ...] = ()
    if to_drain and healthy > 0:  # never drain the last pairs: 503s instead of errors fix nothing
        if action == "Report":
            held.append(f"would drain {len(to_drain)} failing pairs: {', '.join(p.label for p in to_drain[:10])}")
        else:
            drain = to_drain
    new_state = _marked(state, drain, undrain) if drain or undrain else None
    return Plan(replaced, reason if replaced else "", drain, undrain, tuple(held), memory, new_state)


def replacement_hold(engines: Iterable[EnginePod], desired: Mapping[PoolName, int]) -> str:
    """Why no pod may be replaced now ("" when one may). While a rollout of the pairing revision runs, its new pods
    replace the old ones anyway, and engines starting beside them slow every probe (on a loaded node an old pair
    then misses its deadline without holding any stale state); while a pool is short of running engines for another
    reason, deleting one more would only deepen the shortage."""
    pods = list(engines)
    revisions = sorted({pod.revision for pod in pods})
    if len(revisions) > 1:
        return f"a rollout of the pairing revision is in progress (revisions {', '.join(revisions)})"
    for role in ("prefill", "decode"):
        up = sum(1 for pod in pods if pod.role == role and pod.up)
        wanted = desired.get(role, 0)
        if up < wanted:
            return f"the {role} pool runs {up} of {wanted} engines"
    return ""


def _serving_nothing(state: CheckState, failing: list[FailingPair], pods: Mapping[str, EnginePod]) -> list[EnginePod]:
    """Routable engines all of whose known pairs fail (at or past the threshold)."""
    failing_pairs = {f.pair for f in failing}
    involved = {name for pair in failing_pairs for name in (pair.prefill, pair.decode)}
    out = []
    for name in sorted(involved):
        pod = pods[name]
        if not pod.routable:
            continue
        known = [key for key in state.pairs if name in (key.prefill, key.decode) and _current(key, pods)]
        if known and all(key in failing_pairs for key in known):
            out.append(pod)
    return out


def _returning_serving_nothing(
    state: CheckState, failing: list[FailingPair], pods: Mapping[str, EnginePod]
) -> list[EnginePod]:
    """Restarted engines waiting to be admitted again (candidates that served before) all of whose pairs fail:
    the stale-peer case under the serving gate. A new pod that never served is not one of them (it holds up its
    rollout instead, D107)."""
    failing_pairs = {f.pair for f in failing}
    out = []
    for name in sorted({n for pair in failing_pairs for n in (pair.prefill, pair.decode)}):
        pod = pods[name]
        if not pod.returning:
            continue
        known = [key for key in state.pairs if name in (key.prefill, key.decode) and _alive_up(key, pods)]
        if known and all(key in failing_pairs for key in known):
            out.append(pod)
    return out


def _alive_up(key: PairId, pods: Mapping[str, EnginePod]) -> bool:
    return _same_incarnations(key, pods, lambda pod: pod.up)


def _current(key: PairId, pods: Mapping[str, EnginePod]) -> bool:
    return _same_incarnations(key, pods, lambda pod: pod.routable)


def _same_incarnations(key: PairId, pods: Mapping[str, EnginePod], usable: Callable[[EnginePod], bool]) -> bool:
    """Both engines of the pair are the incarnations it was probed with (same restart counts) and usable."""
    prefill, decode = pods.get(key.prefill), pods.get(key.decode)
    return bool(
        prefill
        and decode
        and prefill.restarts == key.prefill_restarts
        and decode.restarts == key.decode_restarts
        and usable(prefill)
        and usable(decode)
    )


def _marked(state: CheckState, drained: Iterable[PairId], undrained: Iterable[PairId]) -> CheckState:
    pairs = dict(state.pairs)
    for key in drained:
        pairs[key] = replace(pairs[key], drained=True)
    for key in undrained:
        pairs[key] = replace(pairs[key], drained=False)
    return replace(state, pairs=pairs)


def _pairs(failing: list[FailingPair]) -> str:
    shown = [f"{f.pair.label}: {f.record.error}" for f in failing[:3]]
    return "; ".join(shown) + (f"; and {len(failing) - 3} more" if len(failing) > 3 else "")
