"""Which engines that are up may become Ready: the pacing of a rollout that never lowers serving capacity.

With the serving readiness gate an engine pod is Ready (counted as available by its Deployment, routed to by the
frontend) only once the operator admits it. Its Deployment (maxUnavailable 0) removes one pod of an older pod
template for each new pod that becomes available beyond the desired count, so admitting is what moves a rollout.

Serving capacity of a pool counts only engines that can serve: a prefill of a pairing revision that has no ready
decode of the same revision serves nothing (the frontend never pairs across revisions), and the other way round.
So admissions are chosen such that, once the Deployments have removed the pods the admissions make surplus, each
pool's serving capacity is at least what it was, or the desired count if that is lower. A rollout that changes the
pairing revision therefore admits the new revision in both pools together (lockstep), and the old revision loses
its last prefill or decode only when the new one can carry the whole pool. Scaling keeps working: a higher desired
count removes nothing, so new engines are admitted as soon as their pairs pass.

Candidates are admitted only when they passed a probe this round, and never into a revision that would have no
ready engine of the other role: a ready engine that serves nothing would be counted as capacity it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from disagg.names import POOLS, PoolName

from .pods import EnginePod

Counts = dict[PoolName, dict[str, int]]
"""pool -> revision -> routable engines."""
MAX_COMBINATIONS = 250_000


@dataclass(frozen=True)
class Admission:
    admit: tuple[str, ...]
    """Pod names to admit, oldest first."""
    waiting: str
    """What the remaining candidates wait for ("" when none wait)."""


def serving_capacity(counts: Counts) -> dict[PoolName, int]:
    """Engines per pool whose revision also has a routable engine of the other pool."""
    out: dict[PoolName, int] = {}
    for pool in POOLS:
        other: PoolName = "decode" if pool == "prefill" else "prefill"
        out[pool] = sum(n for revision, n in counts[pool].items() if n > 0 and counts[other].get(revision, 0) > 0)
    return out


def _after_removals(counts: Counts, desired: Mapping[PoolName, int], target: str, order: list[str]) -> Counts:
    """Counts once each pool's Deployment has removed what exceeds its desired count, oldest revision first."""
    out: Counts = {pool: dict(by_revision) for pool, by_revision in counts.items()}
    for pool in POOLS:
        excess = sum(out[pool].values()) - desired[pool]
        for revision in order:
            if excess <= 0:
                break
            if revision == target:
                continue
            taken = min(excess, out[pool].get(revision, 0))
            if taken:
                out[pool][revision] -= taken
                excess -= taken
    return out


def decide_admissions(
    engines: Iterable[EnginePod],
    passing: frozenset[str],
    desired: Mapping[PoolName, int],
    target: str,
) -> Admission:
    """Choose the candidates to admit this round.

    `passing`: candidates that passed a pair probe this round. `desired`: each pool's desired replica count (the
    spec's or the autoscaler's). `target`: the pairing revision the spec asks for; pods of other revisions are
    older ones being replaced (or added by a scale-up of an older pod template during the rollout).
    """
    pods = list(engines)
    counts: Counts = {pool: {} for pool in POOLS}
    generation: dict[str, int] = {}
    for pod in pods:
        generation[pod.revision] = max(generation.get(pod.revision, 0), pod.generation)
        if pod.routable:
            counts[pod.role][pod.revision] = counts[pod.role].get(pod.revision, 0) + 1
    # Oldest first; the target revision is never what a Deployment removes for surplus.
    order = sorted(generation, key=lambda revision: (revision == target, generation[revision], revision))
    candidates = sorted((p for p in pods if p.candidate and p.name in passing), key=lambda p: (p.created, p.name))
    before = serving_capacity(counts)
    floor = {pool: min(desired[pool], before[pool]) for pool in POOLS}

    def admissible(chosen: list[EnginePod]) -> bool:
        after: Counts = {pool: dict(by_revision) for pool, by_revision in counts.items()}
        for pod in chosen:
            after[pod.role][pod.revision] = after[pod.role].get(pod.revision, 0) + 1
        after = _after_removals(after, desired, target, order)
        for pod in chosen:
            other: PoolName = "decode" if pod.role == "prefill" else "prefill"
            if after[other].get(pod.revision, 0) == 0:
                return False  # it would be ready and serve nothing
        capacity = serving_capacity(after)
        return all(capacity[pool] >= floor[pool] for pool in POOLS)

    # Candidates of revisions other than the target add capacity to what is already there: never a reason to wait.
    groups: dict[tuple[str, PoolName], list[EnginePod]] = {}
    for pod in candidates:
        groups.setdefault((pod.revision, pod.role), []).append(pod)
    chosen: list[EnginePod] = []
    for revision in sorted({r for r, _ in groups}, key=lambda r: (r == target, generation.get(r, 0), r)):
        prefills, decodes = groups.get((revision, "prefill"), []), groups.get((revision, "decode"), [])
        best = _largest(chosen, prefills, decodes, admissible)
        chosen += best
    names = tuple(pod.name for pod in sorted(chosen, key=lambda p: (p.created, p.name)))
    waiting = _waiting(pods, set(names), passing, counts, target)
    return Admission(names, waiting)


def _largest(
    chosen: list[EnginePod],
    prefills: list[EnginePod],
    decodes: list[EnginePod],
    admissible: Callable[[list[EnginePod]], bool],
) -> list[EnginePod]:
    """The largest admissible (prefills[:a], decodes[:b]) on top of `chosen`, preferring balanced steps."""
    options = [(a, b) for a in range(len(prefills) + 1) for b in range(len(decodes) + 1)]
    if len(options) > MAX_COMBINATIONS:  # pools of hundreds of engines: search the diagonal only
        steps = max(len(prefills), len(decodes))
        options = [(round(len(prefills) * i / steps), round(len(decodes) * i / steps)) for i in range(steps + 1)]
    options.sort(key=lambda ab: (-(ab[0] + ab[1]), abs(ab[0] * max(len(decodes), 1) - ab[1] * max(len(prefills), 1))))
    for a, b in options:
        if a == b == 0:
            return []
        picked = [*prefills[:a], *decodes[:b]]
        if admissible([*chosen, *picked]):
            return picked
    return []


def _waiting(pods: list[EnginePod], admitted: set[str], passing: frozenset[str], counts: Counts, target: str) -> str:
    left = [p for p in pods if p.candidate and p.name not in admitted]
    if not left:
        return ""
    untested = [p for p in left if p.name not in passing]
    held = [p for p in left if p.name in passing]
    parts = []
    if untested:
        parts.append(f"{len(untested)} engines to pass a pair probe ({', '.join(p.name for p in untested[:5])})")
    if held:
        parts.append(
            f"{len(held)} engines that passed, held until admitting them keeps both pools' serving capacity "
            "(more engines of their revision must come up first)"
        )
    return "; ".join(parts)


def revision_counts(pods: Iterable[EnginePod]) -> list[tuple[str, dict[str, int]]]:
    """Per revision, newest generation first: routable and waiting engines per pool (for status)."""
    rows: dict[str, dict[str, int]] = {}
    generation: dict[str, int] = {}
    for pod in pods:
        row = rows.setdefault(pod.revision, {"prefill": 0, "decode": 0, "waiting_prefill": 0, "waiting_decode": 0})
        generation[pod.revision] = max(generation.get(pod.revision, 0), pod.generation)
        if pod.routable:
            row[pod.role] += 1
        elif pod.candidate:
            row[f"waiting_{pod.role}"] += 1
    order = sorted(rows, key=lambda r: (generation[r], r), reverse=True)
    return [(revision, rows[revision]) for revision in order]
