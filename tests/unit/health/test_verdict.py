"""Judging a check round: thresholds, drained pairs, candidates, and what the Serving condition says."""

from __future__ import annotations

from dataclasses import replace

from disagg.health.verdict import CheckState, Outcome, PairId, judge
from tests.unit.health.podfactory import engine

NOW = "2026-01-01T00:01:00Z"
P0, P1, D0 = engine("p0", "prefill"), engine("p1", "prefill"), engine("d0", "decode")


def ok(prefill: str, decode: str, **extra: object) -> Outcome:
    return Outcome(prefill, decode, "r1", True, extra.pop("latency", 0.2), **extra)  # type: ignore[arg-type]


def bad(prefill: str, decode: str, **extra: object) -> Outcome:
    return Outcome(prefill, decode, "r1", False, 1.0, "decode failed: 500", **extra)  # type: ignore[arg-type]


def test_every_pair_passing_is_serving_with_the_slowest_latency() -> None:
    _, verdict = judge(CheckState(), [ok("p0", "d0", latency=0.3), ok("p1", "d0", latency=1.25)], [P0, P1, D0], 2, NOW)
    assert (verdict.status, verdict.reason) == ("True", "PairsServe")
    assert verdict.message == "2/2 pairs answered (slowest 1.25 s)"
    assert verdict.serving_engines == {"prefill": 2, "decode": 1}


def test_one_failure_only_makes_a_pair_suspect_the_threshold_makes_it_fail() -> None:
    state, verdict = judge(CheckState(), [bad("p0", "d0"), ok("p1", "d0")], [P0, P1, D0], 2, NOW)
    assert verdict.status == "True" and verdict.suspect == 1 and not verdict.failing
    assert "1 failed once and will be re-checked" in verdict.message
    state, verdict = judge(state, [bad("p0", "d0"), ok("p1", "d0")], [P0, P1, D0], 2, "later")
    assert (verdict.status, verdict.reason) == ("False", "PairsFailing")
    assert verdict.message == "1 of 2 pairs fail: p0->d0: decode failed: 500"
    (failing,) = verdict.failing
    assert failing.record.since == NOW and failing.record.failures == 2
    assert verdict.serving_engines == {"prefill": 1, "decode": 1}


def test_a_pass_clears_the_streak() -> None:
    state, _ = judge(CheckState(), [bad("p0", "d0")], [P0, D0], 2, NOW)
    state, verdict = judge(state, [ok("p0", "d0")], [P0, D0], 2, NOW)
    assert verdict.status == "True"
    assert state.pairs[PairId("p0", 0, "d0", 0)].failures == 0


def test_an_answer_without_kv_moving_is_a_failure() -> None:
    outcome = ok("p0", "d0", kv_transferred=False)
    _, verdict = judge(CheckState(), [outcome], [P0, D0], 1, NOW)
    assert verdict.status == "False"
    assert "no KV transferred" in verdict.failing[0].record.error


def test_a_restarted_engine_makes_new_pairs_with_no_history() -> None:
    state, _ = judge(CheckState(), [bad("p0", "d0")], [P0, D0], 2, NOW)
    restarted = engine("d0", "decode", restarts=1, admitted_at=1)
    state, verdict = judge(state, [bad("p0", "d0")], [P0, restarted], 2, NOW)
    assert verdict.suspect == 1 and not verdict.failing
    assert set(state.pairs) == {PairId("p0", 0, "d0", 1)}


def test_failing_pairs_that_are_drained_leave_serving_true_but_say_so() -> None:
    state, _ = judge(CheckState(), [bad("p0", "d0"), ok("p1", "d0")], [P0, P1, D0], 1, NOW)
    key = PairId("p0", 0, "d0", 0)
    drained = CheckState({**state.pairs, key: replace(state.pairs[key], drained=True)})
    _, verdict = judge(drained, [bad("p0", "d0", drained=True), ok("p1", "d0")], [P0, P1, D0], 1, NOW)
    assert verdict.status == "True" and verdict.drained == 1
    assert "1 failing pairs drained: p0->d0" in verdict.message


def test_no_routable_pair_is_not_serving_and_says_what_is_up() -> None:
    waiting = engine("d1", "decode", admitted_at=None)
    _, verdict = judge(CheckState(), [ok("p0", "d1", candidate=True)], [P0, waiting], 2, NOW)
    assert (verdict.status, verdict.reason) == ("False", "NoPairs")
    assert "1 prefill and 0 decode engines ready, 1 up and being probed (1 passed)" in verdict.message
    assert verdict.passing_candidates == {"d1"}
    assert verdict.candidate_partners["d1"] == {"p0"}


def test_candidate_results_never_count_towards_serving() -> None:
    waiting = engine("d1", "decode", admitted_at=None)
    _, verdict = judge(CheckState(), [ok("p0", "d0"), bad("p0", "d1", candidate=True)], [P0, D0, waiting], 1, NOW)
    assert verdict.status == "True" and verdict.pairs == 1 and not verdict.failing
    assert not verdict.passing_candidates
