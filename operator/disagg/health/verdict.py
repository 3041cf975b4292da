"""One round of the serving check, judged: which pairs pass, which fail, and what the Serving condition says.

A *pair* is one prefill and one decode engine of the same pairing revision, identified by both pods' incarnations
(name and restart count): a pair whose engine restarted is a new pair with no history. A pair *fails* after
`failure_threshold` consecutive failed probes; one failed probe only makes it suspect (the shell re-checks a
failed round after a short delay rather than a whole interval, so a real failure is confirmed quickly and a single
slow answer under load is not reported). A probe fails when the request does not come back 200 within the
deadline, or comes back without the KV having moved (decode's own counters show no transferred prompt tokens:
the request was answered by decode recomputing the prompt, which is not P/D serving).

Serving is True when every routable pair that is not drained passes (at least one must exist); False when a
routable, undrained pair fails, when no pair exists, or when no frontend answers; Unknown when the check could not
run (its API unreachable, or the check is off).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from .pods import EnginePod

Status = Literal["True", "False", "Unknown"]
MAX_LISTED = 10
"""Failing pairs named in status and messages; the counts cover the rest."""


@dataclass(frozen=True, order=True)
class PairId:
    prefill: str
    prefill_restarts: int
    decode: str
    decode_restarts: int

    @property
    def label(self) -> str:
        return f"{self.prefill}->{self.decode}"


@dataclass(frozen=True)
class Outcome:
    """What the frontend answered for one probed pair."""

    prefill: str
    decode: str
    revision: str
    ok: bool
    latency: float
    error: str = ""
    kv_transferred: bool | None = None
    candidate: bool = False
    """At least one engine of the pair is up but not yet admitted (the frontend does not route through it)."""
    drained: bool = False

    @property
    def passed(self) -> bool:
        return self.ok and self.kv_transferred is not False

    @property
    def problem(self) -> str:
        if not self.ok:
            return self.error or "no answer"
        if self.kv_transferred is False:
            return "answered, but decode's counters show no KV transferred (decode recomputed the prompt)"
        return ""


@dataclass(frozen=True)
class PairRecord:
    failures: int = 0
    """Consecutive failed probes."""
    since: str | None = None
    """When the current streak of failures began."""
    error: str = ""
    passed_once: bool = False
    """The pair served at least once (so a failure now is something that stopped working)."""
    drained: bool = False
    revision: str = ""


@dataclass(frozen=True)
class CheckState:
    """What the check remembers between rounds (the shell keeps one per DisaggDeployment, in memory)."""

    pairs: Mapping[PairId, PairRecord] = field(default_factory=dict)
    rounds: int = 0


@dataclass(frozen=True)
class FailingPair:
    pair: PairId
    record: PairRecord
    revision: str


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    message: str
    pairs: int = 0
    """Routable pairs the frontend may choose."""
    probed: int = 0
    passing: int = 0
    failing: list[FailingPair] = field(default_factory=list)
    """Routable pairs at or past the failure threshold, drained ones included."""
    serving_engines: Mapping[str, int] = field(default_factory=dict)
    passing_candidates: frozenset[str] = frozenset()
    """Candidate engines (by pod name) with at least one pair that passed this round, and the partners it passed
    with, by pod name: the admission step reads these."""
    candidate_partners: Mapping[str, frozenset[str]] = field(default_factory=dict)
    slowest: float | None = None
    suspect: int = 0
    """Routable pairs that failed this round but not yet failure_threshold times."""
    failing_candidates: list[FailingPair] = field(default_factory=list)
    """Candidate pairs at or past the threshold: not routed, so not in Serving, but remediation reads them (a
    restarted engine that peers hold stale state about is a candidate again, D106)."""
    suspect_candidates: int = 0
    """Candidate pairs through a restarted engine (one that served before) that failed but not yet enough."""

    @property
    def drained(self) -> int:
        return sum(1 for f in self.failing if f.record.drained)


def pair_id(outcome: Outcome, pods: Mapping[str, EnginePod]) -> PairId | None:
    prefill, decode = pods.get(outcome.prefill), pods.get(outcome.decode)
    if prefill is None or decode is None:
        return None  # the pod went away between the frontend's answer and ours
    return PairId(prefill.name, prefill.restarts, decode.name, decode.restarts)


def judge(
    state: CheckState, outcomes: Iterable[Outcome], pods: Iterable[EnginePod], failure_threshold: int, now: str
) -> tuple[CheckState, Verdict]:
    """Fold one round's outcomes into the pair history and say whether the deployment serves."""
    by_name = {pod.name: pod for pod in pods}
    records: dict[PairId, PairRecord] = {}
    routable: list[tuple[PairId, Outcome]] = []
    candidates: list[tuple[PairId, Outcome]] = []
    passing_candidates: set[str] = set()
    partners: dict[str, set[str]] = {}
    slowest: float | None = None
    probed = 0
    for outcome in outcomes:
        key = pair_id(outcome, by_name)
        if key is None:
            continue
        probed += 1
        before = state.pairs.get(key, PairRecord(revision=outcome.revision))
        if outcome.passed:
            record = PairRecord(passed_once=True, drained=before.drained, revision=outcome.revision)
            if not outcome.candidate:
                slowest = outcome.latency if slowest is None else max(slowest, outcome.latency)
        else:
            record = replace(
                before,
                failures=before.failures + 1,
                since=before.since or now,
                error=outcome.problem[:500],
                revision=outcome.revision,
            )
        records[key] = record
        if outcome.candidate:
            candidates.append((key, outcome))
            if outcome.passed:
                for name in (outcome.prefill, outcome.decode):
                    if not by_name[name].admitted:
                        passing_candidates.add(name)
                partners.setdefault(outcome.prefill, set()).add(outcome.decode)
                partners.setdefault(outcome.decode, set()).add(outcome.prefill)
        else:
            routable.append((key, outcome))
    # Pairs not probed this round (sampled out) keep their history while both engines still exist.
    for key, record in state.pairs.items():
        if key not in records and _alive(key, by_name):
            records[key] = record
    new_state = CheckState(records, state.rounds + 1)

    failing = [
        FailingPair(key, records[key], outcome.revision)
        for key, outcome in routable
        if records[key].failures >= failure_threshold
    ]
    failing.sort(key=lambda f: (f.record.since or "", f.pair))
    suspect = sum(1 for key, _ in routable if 0 < records[key].failures < failure_threshold)
    failing_candidates = [
        FailingPair(key, records[key], outcome.revision)
        for key, outcome in candidates
        if records[key].failures >= failure_threshold
    ]
    suspect_candidates = sum(
        1
        for key, _ in candidates
        if 0 < records[key].failures < failure_threshold
        and any(by_name[name].returning for name in (key.prefill, key.decode))
    )
    passing = sum(1 for key, _ in routable if records[key].failures == 0)
    serving_engines = _serving_engines(key for key, _ in routable if records[key].failures < failure_threshold)
    undrained_failing = [f for f in failing if not f.record.drained]
    status: Status
    if not routable:
        status, reason = "False", "NoPairs"
        message = _no_pairs_message(by_name.values(), passing_candidates, [records[k] for k, _ in candidates])
    elif undrained_failing:
        status, reason = "False", "PairsFailing"
        message = f"{len(failing)} of {len(routable)} pairs fail: " + _list(undrained_failing)
    elif len(failing) == len(routable):
        status, reason = "False", "PairsFailing"
        message = f"every pair fails (all drained): {_list(failing)}"
    else:
        status, reason = "True", "PairsServe"
        message = f"{len(routable) - len(failing)}/{len(routable)} pairs answered"
        if slowest is not None:
            message += f" (slowest {slowest:.2f} s)"
        if failing:
            message += f"; {len(failing)} failing pairs drained: {_list(failing)}"
        if suspect:
            message += f"; {suspect} failed once and will be re-checked"
    verdict = Verdict(
        status,
        reason,
        message,
        pairs=len(routable),
        probed=probed,
        passing=passing,
        failing=failing,
        serving_engines=serving_engines,
        passing_candidates=frozenset(passing_candidates),
        candidate_partners={name: frozenset(found) for name, found in partners.items()},
        slowest=slowest,
        suspect=suspect,
        failing_candidates=failing_candidates,
        suspect_candidates=suspect_candidates,
    )
    return new_state, verdict


def _alive(key: PairId, pods: Mapping[str, EnginePod]) -> bool:
    prefill, decode = pods.get(key.prefill), pods.get(key.decode)
    return (
        prefill is not None
        and decode is not None
        and prefill.restarts == key.prefill_restarts
        and decode.restarts == key.decode_restarts
    )


def _serving_engines(keys: Iterable[PairId]) -> dict[str, int]:
    prefills: set[str] = set()
    decodes: set[str] = set()
    for key in keys:
        prefills.add(key.prefill)
        decodes.add(key.decode)
    return {"prefill": len(prefills), "decode": len(decodes)}


def _list(failing: list[FailingPair]) -> str:
    shown = [f"{f.pair.label}: {f.record.error}" for f in failing[:MAX_LISTED]]
    more = len(failing) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _no_pairs_message(
    pods: Iterable[EnginePod], passing_candidates: set[str], candidate_records: list[PairRecord]
) -> str:
    engines = list(pods)
    routable = {role: sum(1 for e in engines if e.role == role and e.routable) for role in ("prefill", "decode")}
    waiting = sum(1 for e in engines if e.candidate)
    text = f"the frontend has no prefill/decode pair to route to ({routable['prefill']} prefill and "
    text += f"{routable['decode']} decode engines ready"
    if waiting:
        text += f", {waiting} up and being probed ({len(passing_candidates)} passed)"
    errors = sorted({r.error for r in candidate_records if r.failures and r.error})
    if errors:
        text += f"; their probes fail: {'; '.join(errors[:3])}"
    return text + ")"


def not_checked(status: Status, reason: str, message: str) -> Verdict:
    """A round that produced no pair results: the check is off, no frontend answers, or its API failed."""
    return Verdict(status, reason, message)
