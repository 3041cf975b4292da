"""Engine selection: per-role policies, pairing revisions and drained pairs (pure: no I/O, the clock is passed in).

A request is served by one *pair*: a prefill and a decode engine of the same pairing revision. Selection first
picks a revision that has a complete, undrained pair set, then the engines inside it, so a prefill and a decode of
different revisions are never paired. While two revisions are live both serve: `capacity` (the default) splits
requests between them in proportion to their pair capacity (min of ready prefill and decode engines), breaking
ties towards the newest generation; `newest` sends everything to the newest complete revision.

Policies per role: `round_robin`, `least_loaded` (fewest requests this frontend has in flight on the engine, ties
in rotation) and `consistent_hash` (a key, the conversation or session id, maps to the same engine while the
engine set is unchanged; requests without a key rotate). The state here (counters, in-flight counts, drains) is
plain data mutated by method calls; the shell owns when they happen.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .contract import Engine, EngineRole

Policy = Literal["round_robin", "least_loaded", "consistent_hash"]
POLICIES: tuple[Policy, ...] = ("round_robin", "least_loaded", "consistent_hash")
RevisionPolicy = Literal["capacity", "newest"]
REVISION_POLICIES: tuple[RevisionPolicy, ...] = ("capacity", "newest")
_VIRTUAL_NODES = 64


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Pair:
    prefill: Engine
    decode: Engine

    @property
    def revision(self) -> str:
        return self.decode.revision

    @property
    def label(self) -> str:
        return f"{self.prefill.name}->{self.decode.name}"


@dataclass(frozen=True)
class NoPair:
    """Why no pair could be chosen; the shell answers 503 with this reason."""

    reason: str


@dataclass(frozen=True)
class PairInfo:
    pair: Pair
    drained: bool
    drained_until: float | None
    drain_reason: str


class _Ring:
    def __init__(self, engines: Sequence[Engine]) -> None:
        points = sorted((_hash64(f"{e.key}#{i}"), e.key) for e in engines for i in range(_VIRTUAL_NODES))
        self._hashes = [h for h, _ in points]
        self._keys = [k for _, k in points]

    def order(self, key: str) -> list[str]:
        """Engine keys in ring order from the key's point: the first one is the key's engine."""
        if not self._keys:
            return []
        start = bisect.bisect(self._hashes, _hash64(key)) % len(self._keys)
        seen: dict[str, None] = {}
        for i in range(len(self._keys)):
            seen.setdefault(self._keys[(start + i) % len(self._keys)], None)
        return list(seen)


class Selector:
    def __init__(
        self,
        prefill_policy: Policy = "round_robin",
        decode_policy: Policy = "round_robin",
        revision_policy: RevisionPolicy = "capacity",
    ) -> None:
        self.policies: dict[EngineRole, Policy] = {"prefill": prefill_policy, "decode": decode_policy}
        self.revision_policy = revision_policy
        self._engines: dict[EngineRole, list[Engine]] = {"prefill": [], "decode": [], "render": []}
        self._candidates: dict[EngineRole, list[Engine]] = {"prefill": [], "decode": [], "render": []}
        self._by_key: dict[str, Engine] = {}
        self._rings: dict[tuple[EngineRole, str], _Ring] = {}
        self._counters: dict[str, int] = {}
        self._inflight: dict[str, int] = {}
        self._drained: dict[tuple[str, str], tuple[float | None, str]] = {}
        self._by_revision: dict[str, tuple[list[Engine], list[Engine]]] = {}
        self._wrr: dict[str, float] = {}

    # ---- the engine view ------------------------------------------------------------------------------------
    def update(self, engines: Iterable[Engine]) -> None:
        """Replace the set of serving engines (a discovery snapshot). State of vanished engines is dropped.
        Candidates (up, not yet admitted by the operator) are kept apart: probed, never chosen."""
        by_role: dict[EngineRole, list[Engine]] = {"prefill": [], "decode": [], "render": []}
        candidates: dict[EngineRole, list[Engine]] = {"prefill": [], "decode": [], "render": []}
        for engine in engines:
            (candidates if engine.candidate else by_role)[engine.role].append(engine)
        for role in by_role:
            by_role[role].sort(key=lambda e: (e.name, e.key))
            candidates[role].sort(key=lambda e: (e.name, e.key))
        self._engines = by_role
        self._candidates = candidates
        self._by_key = {e.key: e for role in by_role.values() for e in role}
        self._rings = {}
        self._inflight = {k: v for k, v in self._inflight.items() if k in self._by_key}
        self._drained = {
            pair: until for pair, until in self._drained.items() if pair[0] in self._by_key and pair[1] in self._by_key
        }
        self._by_revision = self._group_by_revision(by_role)

    @staticmethod
    def _group_by_revision(by_role: dict[EngineRole, list[Engine]]) -> dict[str, tuple[list[Engine], list[Engine]]]:
        """Each revision both roles serve, with its prefills and decodes: decided once per discovery snapshot, since
        every request asks which revisions are complete."""
        common = {e.revision for e in by_role["decode"]} & {e.revision for e in by_role["prefill"]}
        return {
            revision: (
                [e for e in by_role["prefill"] if e.revision == revision],
                [e for e in by_role["decode"] if e.revision == revision],
            )
            for revision in sorted(common)
        }

    def engines(self, role: EngineRole) -> list[Engine]:
        return list(self._engines[role])

    def candidates(self, role: EngineRole) -> list[Engine]:
        return list(self._candidates[role])

    def candidate_pairs(self) -> list[Pair]:
        """Same-revision pairs through at least one candidate (the other engine a candidate or routable): what the
        operator probes before it admits a new engine."""
        out = []
        for prefill in [*self._engines["prefill"], *self._candidates["prefill"]]:
            for decode in [*self._engines["decode"], *self._candidates["decode"]]:
                if prefill.revision == decode.revision and (prefill.candidate or decode.candidate):
                    out.append(Pair(prefill, decode))
        return out

    def engine(self, key: str) -> Engine | None:
        return self._by_key.get(key)

    def find_decode(self, *, engine_id: str | None = None, host: str | None = None) -> Engine | None:
        """The decode engine that holds a conversation's blocks, by its KV engine id or side-channel host."""
        for engine in self._engines["decode"]:
            if engine_id is not None and engine.engine_id == engine_id:
                return engine
        if host is not None:
            for engine in self._engines["decode"]:
                if engine.host == host:
                    return engine
        return None

    # ---- drains ---------------------------------------------------------------------------------------------
    def drain(self, prefill_key: str, decode_key: str, until: float | None, reason: str = "") -> None:
        self._drained[(prefill_key, decode_key)] = (until, reason)

    def undrain(self, prefill_key: str, decode_key: str) -> bool:
        return self._drained.pop((prefill_key, decode_key), None) is not None

    def is_drained(self, prefill_key: str, decode_key: str, now: float) -> bool:
        entry = self._drained.get((prefill_key, decode_key))
        if entry is None:
            return False
        until, _ = entry
        if until is not None and until <= now:
            del self._drained[(prefill_key, decode_key)]
            return False
        return True

    def pairs(self, now: float) -> list[PairInfo]:
        """Every pairing the frontend may choose (same revision), with its drain state."""
        out = []
        for prefill in self._engines["prefill"]:
            for decode in self._engines["decode"]:
                if prefill.revision != decode.revision:
                    continue
                drained = self.is_drained(prefill.key, decode.key, now)
                until, reason = self._drained.get((prefill.key, decode.key), (None, ""))
                out.append(PairInfo(Pair(prefill, decode), drained, until if drained else None, reason))
        return out

    # ---- load accounting ------------------------------------------------------------------------------------
    def acquire(self, *engines: Engine) -> None:
        for engine in engines:
            self._inflight[engine.key] = self._inflight.get(engine.key, 0) + 1

    def release(self, *engines: Engine) -> None:
        for engine in engines:
            left = self._inflight.get(engine.key, 0) - 1
            if left > 0:
                self._inflight[engine.key] = left
            else:
                self._inflight.pop(engine.key, None)

    def inflight(self, engine: Engine) -> int:
        return self._inflight.get(engine.key, 0)

    # ---- choosing -------------------------------------------------------------------------------------------
    def revisions(self, now: float) -> dict[str, int]:
        """Complete revisions and their pair capacity: min(prefills, decodes) with at least one undrained pair."""
        out: dict[str, int] = {}
        for revision, (prefills, decodes) in self._by_revision.items():
            if not self._drained or any(not self.is_drained(p.key, d.key, now) for p in prefills for d in decodes):
                out[revision] = min(len(prefills), len(decodes))
        return out

    def _generation(self, revision: str) -> int:
        return max(
            (e.generation for role in ("prefill", "decode") for e in self._engines[role] if e.revision == revision),
            default=0,
        )

    def _pick_revision(self, capacities: dict[str, int], key: str | None) -> str:
        if len(capacities) == 1:
            return next(iter(capacities))
        newest_first = sorted(capacities, key=lambda r: (self._generation(r), r), reverse=True)
        if self.revision_policy == "newest":
            return newest_first[0]
        if key is not None:
            # Weighted rendezvous hashing: a key keeps its revision while the set is unchanged.
            def score(revision: str) -> float:
                unit = (_hash64(f"{key}@{revision}") + 1) / (2**64 + 1)
                return -capacities[revision] / math.log(unit)

            return max(newest_first, key=score)
        # Smooth weighted round robin (nginx): deterministic, proportional, interleaved.
        total = sum(capacities.values())
        for revision in newest_first:
            self._wrr[revision] = self._wrr.get(revision, 0.0) + capacities[revision]
        best = max(newest_first, key=lambda r: self._wrr[r])
        self._wrr[best] -= total
        for stale in set(self._wrr) - set(capacities):
            del self._wrr[stale]
        return best

    def _rotate(self, name: str, count: int) -> int:
        value = self._counters.get(name, 0)
        self._counters[name] = value + 1
        return value % count

    def _order(self, role: EngineRole, candidates: list[Engine], key: str | None, revision: str) -> list[Engine]:
        """Candidates in the order the role's policy prefers them."""
        policy = self.policies[role]
        if policy == "consistent_hash" and key is not None:
            ring = self._rings.get((role, revision))
            if ring is None:
                ring = self._rings[(role, revision)] = _Ring(candidates)
            by_key = {e.key: e for e in candidates}
            return [by_key[k] for k in ring.order(key) if k in by_key]
        start = self._rotate(f"{role}@{revision}", len(candidates))
        rotated = candidates[start:] + candidates[:start]
        if policy == "least_loaded":
            return sorted(rotated, key=self.inflight)
        return rotated

    def choose(self, now: float, key: str | None = None, pin_decode: Engine | None = None) -> Pair | NoPair:
        """Pick a pair. `pin_decode` (conversation affinity) wins when it is still serving and has an undrained
        prefill of its own revision; otherwise selection falls back to the policies."""
        capacities = self.revisions(now)
        if not capacities:
            if not self._engines["prefill"] or not self._engines["decode"]:
                missing = [r for r in ("prefill", "decode") if not self._engines[r]]
                return NoPair(f"no serving {' or '.join(missing)} engine")
            return NoPair("no prefill and decode engine of the same pairing revision with an undrained pair")
        if pin_decode is not None and pin_decode.key in self._by_key and pin_decode.revision in capacities:
            revision = pin_decode.revision
            decodes = [pin_decode]
        else:
            revision = self._pick_revision(capacities, key)
            decodes = self._order("decode", self._by_revision[revision][1], key, revision)
        prefills = self._order("prefill", self._by_revision[revision][0], key, revision)
        for decode in decodes:
            for prefill in prefills:
                if not self.is_drained(prefill.key, decode.key, now):
                    return Pair(prefill, decode)
        if pin_decode is not None:
            # Every pair with the pinned decode is drained: serving elsewhere beats failing (the blocks are lost).
            return self.choose(now, key, None)
        return NoPair(f"every pair of revision {revision!r} is drained")

    def choose_render(self, key: str | None = None) -> Engine | None:
        candidates = self._engines["render"]
        if not candidates:
            return None
        return candidates[self._rotate("render", len(candidates))]
