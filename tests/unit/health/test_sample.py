"""Sampling pairs at large pool sizes: urgent pairs first, every other pair within ceil(pairs / max) rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from disagg.health.sample import choose_pairs
from disagg.health.verdict import CheckState, Outcome, judge
from tests.unit.health.podfactory import engine


@dataclass(frozen=True)
class Ref:
    prefill: str
    decode: str
    drained: bool = False
    candidate: bool = False


PODS = [engine(f"p{i}", "prefill") for i in range(6)] + [engine(f"d{i}", "decode") for i in range(5)]
REFS = [Ref(f"p{i}", f"d{j}") for i in range(6) for j in range(5)]


def test_everything_is_probed_when_it_fits() -> None:
    assert choose_pairs(REFS, CheckState(), PODS, 64) == REFS


def test_every_pair_is_probed_within_ceil_pairs_over_max_rounds() -> None:
    state = judge(CheckState(), [Outcome(r.prefill, r.decode, "r1", True, 0.1) for r in REFS], PODS, 2, "t")[0]
    seen: set[Ref] = set()
    rounds = math.ceil(len(REFS) / 7)
    for _ in range(rounds):
        chosen = choose_pairs(REFS, state, PODS, 7)
        assert len(chosen) == 7
        seen |= set(chosen)
        state = judge(state, [Outcome(r.prefill, r.decode, "r1", True, 0.1) for r in chosen], PODS, 2, "t")[0]
    assert seen == set(REFS)


def test_pairs_never_probed_and_candidates_come_first() -> None:
    state = judge(CheckState(), [Outcome(r.prefill, r.decode, "r1", True, 0.1) for r in REFS[:-2]], PODS, 2, "t")[0]
    refs = [*REFS[:-1], Ref("p5", "d4", candidate=True)]
    chosen = choose_pairs(refs, state, PODS, 3)
    assert REFS[-2] in chosen and Ref("p5", "d4", candidate=True) in chosen
