"""Which pairs one round probes (pure): all of them up to `max_pairs`, else a sample that still covers every pair.

First the pairs that decide something now: pairs through engines waiting to be admitted, pairs never probed (a
new or restarted engine), pairs that failed last time (to confirm or clear them) and drained pairs (to lift the
drain). Then the rest in a rotation that moves by `max_pairs` every round, so each pair is probed at least once
every ceil(pairs / max_pairs) rounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from .pods import EnginePod
from .verdict import CheckState, PairId


class PairLike(Protocol):
    @property
    def prefill(self) -> str: ...

    @property
    def decode(self) -> str: ...

    @property
    def drained(self) -> bool: ...

    @property
    def candidate(self) -> bool: ...


def _key(ref: PairLike, pods: Mapping[str, EnginePod]) -> PairId | None:
    prefill, decode = pods.get(ref.prefill), pods.get(ref.decode)
    if prefill is None or decode is None:
        return None
    return PairId(prefill.name, prefill.restarts, decode.name, decode.restarts)


P = TypeVar("P", bound=PairLike)


def choose_pairs(refs: Sequence[P], state: CheckState, engines: Iterable[EnginePod], max_pairs: int) -> list[P]:
    pods = {pod.name: pod for pod in engines}
    known = [ref for ref in refs if _key(ref, pods) is not None]
    if len(known) <= max_pairs:
        return list(known)
    urgent: list[P] = []
    rest: list[P] = []
    for ref in known:
        key = _key(ref, pods)
        record = state.pairs.get(key) if key is not None else None
        if ref.candidate or ref.drained or record is None or record.failures > 0:
            urgent.append(ref)
        else:
            rest.append(ref)
    if len(urgent) >= max_pairs:
        return urgent[:max_pairs]
    room = max_pairs - len(urgent)
    start = (state.rounds * room) % len(rest) if rest else 0
    rotated = rest[start:] + rest[:start]
    return urgent + rotated[:room]
