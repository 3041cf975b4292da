"""Remediation: recreate the engine that serves nothing (the restarted one), drain other failing pairs, report only
when told to, and never more than the cooldown allows."""

from __future__ import annotations

from disagg.health.pods import EnginePod
from disagg.health.remediation import Memory, effective_cooldown, memory_from_status, memory_status, plan_remediation
from disagg.health.verdict import CheckState, Outcome, PairId, Verdict, judge
from tests.unit.health.podfactory import engine

COOLDOWN = 120.0


def round_of(state: CheckState, outcomes: list[Outcome], pods: list[EnginePod]) -> tuple[CheckState, Verdict]:
    return judge(state, outcomes, pods, 1, "t")


def ok(p: str, d: str) -> Outcome:
    return Outcome(p, d, "r1", True, 0.1)


def bad(p: str, d: str) -> Outcome:
    return Outcome(p, d, "r1", False, 1.0, "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT")


def test_the_restarted_prefill_whose_every_pair_fails_is_recreated() -> None:
    # The 1P1D stale-peer case measured on vLLM 0.32: prefill restarted under the same engine id, decode kept its agent.
    prefill = engine("p0", "prefill", restarts=1, admitted_at=1, started="2026-01-01T01:00:00Z")
    decode = engine("d0", "decode", started="2026-01-01T00:00:10Z")
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], [prefill, decode])
    plan = plan_remediation("Recreate", verdict, state, [prefill, decode], Memory(), 1000.0, COOLDOWN)
    assert plan.replace is not None and plan.replace.name == "p0"
    assert "(re)started most recently (restarts=1)" in plan.replace_reason
    assert plan.drain == () and plan.memory == Memory(1000.0, 1)


def test_the_cooldown_holds_the_next_recreation_and_doubles_while_serving_does_not_come_back() -> None:
    pods = [engine("p0", "prefill", started="2026-01-01T01:00:00Z"), engine("d0", "decode")]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    held = plan_remediation("Recreate", verdict, state, pods, Memory(1000.0, 1), 1000.0 + COOLDOWN, COOLDOWN)
    assert held.replace is None and "the cooldown has 120 s left" in held.held[0]
    assert effective_cooldown(COOLDOWN, 1) == 240 and effective_cooldown(COOLDOWN, 10) == 3600
    later = plan_remediation("Recreate", verdict, state, pods, Memory(1000.0, 1), 1000.0 + 241, COOLDOWN)
    assert later.replace is not None and later.memory.unrecovered == 2


def test_serving_again_resets_the_backoff() -> None:
    pods = [engine("p0", "prefill"), engine("d0", "decode")]
    state, verdict = round_of(CheckState(), [ok("p0", "d0")], pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(1000.0, 3), 2000.0, COOLDOWN)
    assert plan.memory == Memory(1000.0, 0) and plan.replace is None


def test_a_pair_that_failed_once_is_not_serving_again_so_the_backoff_stays() -> None:
    # Threshold 2: one failed probe leaves Serving True but the pair suspect. That is not recovery (after a
    # takeover every streak restarts at zero, so the first round always looks like this).
    pods = [engine("p0", "prefill"), engine("d0", "decode")]
    state, verdict = judge(CheckState(), [bad("p0", "d0")], pods, 2, "t")
    assert verdict.status == "True" and verdict.suspect == 1
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(1000.0, 3), 2000.0, COOLDOWN)
    assert plan.memory == Memory(1000.0, 3)


def test_the_cooldown_survives_status_as_text() -> None:
    assert memory_status(Memory()) is None
    recorded = memory_status(Memory(1767225600.0, 2))
    assert recorded == {"unrecovered": 2, "lastReplacementTime": "2026-01-01T00:00:00Z"}
    assert memory_from_status(recorded) == Memory(1767225600.0, 2)
    assert memory_from_status({"unrecovered": 1}) == Memory(None, 1)
    assert memory_status(Memory(None, 1)) == {"unrecovered": 1}


def test_a_cooldown_in_status_that_cannot_be_read_counts_as_none() -> None:
    for recorded in (None, "x", {"unrecovered": True}, {"unrecovered": -1}, {"lastReplacementTime": "yesterday"}):
        assert memory_from_status(recorded) == Memory(), recorded
    # A time without a zone names no instant: it is not trusted either.
    assert memory_from_status({"lastReplacementTime": "2026-01-01T00:00:00", "unrecovered": 1}) == Memory(None, 1)


def test_report_only_says_what_it_would_do() -> None:
    pods = [engine("p0", "prefill", started="2026-01-01T01:00:00Z"), engine("d0", "decode")]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    plan = plan_remediation("Report", verdict, state, pods, Memory(), 1000.0, COOLDOWN)
    assert plan.replace is None and plan.drain == ()
    assert plan.held[0].startswith("would replace pod p0: every pair through prefill p0 fails")


def test_a_pair_failing_between_engines_that_serve_elsewhere_is_drained_not_recreated() -> None:
    pods = [engine("p0", "prefill"), engine("p1", "prefill"), engine("d0", "decode"), engine("d1", "decode")]
    outcomes = [bad("p0", "d0"), ok("p0", "d1"), ok("p1", "d0"), ok("p1", "d1")]
    state, verdict = round_of(CheckState(), outcomes, pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(), 1000.0, COOLDOWN)
    assert plan.replace is None and plan.drain == (PairId("p0", 0, "d0", 0),)
    assert plan.state is not None and plan.state.pairs[PairId("p0", 0, "d0", 0)].drained
    # Once it passes again the drain is lifted.
    state, verdict = round_of(plan.state, [ok("p0", "d0"), ok("p0", "d1"), ok("p1", "d0"), ok("p1", "d1")], pods)
    lifted = plan_remediation("Recreate", verdict, state, pods, Memory(), 1100.0, COOLDOWN)
    assert lifted.undrain == (PairId("p0", 0, "d0", 0),)


def test_the_last_pairs_are_never_drained() -> None:
    pods = [engine("p0", "prefill"), engine("d0", "decode")]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    plan = plan_remediation("Drain", verdict, state, pods, Memory(), 1000.0, COOLDOWN)
    assert plan.drain == () and plan.replace is None
    assert plan.held and "(remediation.action is Drain)" in plan.held[0]


def test_one_decode_with_a_stale_peer_among_several_prefills_recreates_the_prefill_only() -> None:
    fresh = engine("p2", "prefill", restarts=2, admitted_at=2, started="2026-01-01T02:00:00Z")
    pods = [engine("p0", "prefill"), engine("p1", "prefill"), fresh, engine("d0", "decode")]
    outcomes = [ok("p0", "d0"), ok("p1", "d0"), bad("p2", "d0")]
    state, verdict = round_of(CheckState(), outcomes, pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(), 1000.0, COOLDOWN)
    assert plan.replace is not None and plan.replace.name == "p2"


def cand_bad(p: str, d: str) -> Outcome:
    return Outcome(p, d, "r1", False, 1.0, "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT", candidate=True)


def test_a_restarted_engine_waiting_for_its_gate_whose_every_pair_fails_is_recreated() -> None:
    # Under the serving gate a restart makes the engine a candidate again, so its pairs are not routable; it served
    # before (the gate was revoked), and its peers hold stale state about it.
    prefill = engine("p0", "prefill", restarts=1, admitted_at=None, revoked=True, started="2026-01-01T01:00:00Z")
    decode = engine("d0", "decode")
    assert prefill.returning and not decode.candidate
    state, verdict = round_of(CheckState(), [cand_bad("p0", "d0")], [prefill, decode])
    assert verdict.reason == "NoPairs" and "NIXL_ERR_REMOTE_DISCONNECT" in verdict.message
    plan = plan_remediation("Recreate", verdict, state, [prefill, decode], Memory(), 1000.0, COOLDOWN)
    assert plan.replace is not None and plan.replace.name == "p0"
    report = plan_remediation("Report", verdict, state, [prefill, decode], Memory(), 1000.0, COOLDOWN)
    assert report.replace is None and report.held[0].startswith("would replace pod p0")


def test_a_new_engine_that_never_served_is_not_recreated_however_often_it_fails() -> None:
    prefill = engine("p1", "prefill", admitted_at=None, started="2026-01-01T01:00:00Z")
    decode = engine("d0", "decode")
    assert prefill.candidate and not prefill.returning
    state = CheckState()
    for _ in range(3):
        state, verdict = round_of(state, [cand_bad("p1", "d0")], [prefill, decode])
    assert verdict.failing_candidates and verdict.suspect_candidates == 0
    plan = plan_remediation("Recreate", verdict, state, [prefill, decode], Memory(), 1000.0, COOLDOWN)
    assert plan.replace is None and plan.held == ()


def test_no_pod_is_replaced_while_a_rollout_runs_or_a_pool_is_short_of_running_engines() -> None:
    # Seen on the real node: during a rollout on two loaded cores the old pair missed its deadline while the new
    # engines started; replacing its prefill took the old revision's last one and failed the load it served.
    old_prefill = engine("p0", "prefill", revision="r1", restarts=1, admitted_at=1, started="2026-01-01T01:00:00Z")
    old_decode = engine("d0", "decode", revision="r1")
    new = [engine("p1", "prefill", revision="r2", up=False), engine("d1", "decode", revision="r2", up=False)]
    pods = [old_prefill, old_decode, *new]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(), 1000.0, COOLDOWN, {"prefill": 1, "decode": 1})
    assert plan.replace is None
    assert "a rollout of the pairing revision is in progress (revisions r1, r2)" in plan.held[0]
    # One revision, but decode runs 1 of the 2 engines it should: hold too.
    pods = [old_prefill, old_decode, engine("d2", "decode", revision="r1", up=False)]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(), 1000.0, COOLDOWN, {"prefill": 1, "decode": 2})
    assert plan.replace is None and "the decode pool runs 1 of 2 engines" in plan.held[0]
    # Nothing else going on: replaced.
    pods = [old_prefill, old_decode]
    state, verdict = round_of(CheckState(), [bad("p0", "d0")], pods)
    plan = plan_remediation("Recreate", verdict, state, pods, Memory(), 1000.0, COOLDOWN, {"prefill": 1, "decode": 1})
    assert plan.replace is not None and plan.replace.name == "p0"
