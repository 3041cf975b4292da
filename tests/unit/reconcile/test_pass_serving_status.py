"""status.serving and status.rollout as a user reads them (`kubectl get -o yaml`): every field, by name and value,
for a serving pair, a failing one and a rollout that waits. The CRD's schema names these fields; a field renamed or
dropped here is a field the user's dashboards and alerts lose."""

from __future__ import annotations

from tests.support.reconciling import MINIMAL, deployment_document
from tests.support.serving import checked_harness, create_pod, kubelet
from tests.unit.reconcile.test_pass_serving import FRONTEND, _serving, _serving_two_by_two, old_revision_pods

STAMP = "2026-01-01T00:00:00Z"  # the harness's clock (tests/support/reconciling.py)


async def test_a_serving_pair_is_reported_with_every_count_the_check_saw_and_its_slowest_probe() -> None:
    h, _frontend, _clock = await _serving()
    assert h.status["serving"] == {
        "mode": "Enforce",
        "method": "pairs",
        "lastCheckTime": STAMP,
        "pairs": 1,
        "probed": 1,
        "passing": 1,
        "failing": 0,
        "drained": 0,
        "slowestSeconds": 0.05,  # the fake frontend's probe latency, rounded to the millisecond
    }


async def test_a_failing_pair_is_listed_with_its_error_and_since_and_the_remediation_is_recorded() -> None:
    h, frontend, clock = await _serving()
    frontend.behaviour = lambda p, d: "decode failed: 500 X"
    clock.now += 10
    await h.reconcile()
    clock.now += 2
    await h.reconcile()
    serving = h.status["serving"]
    assert {k: serving[k] for k in ("pairs", "probed", "passing", "failing", "drained")} == {
        "pairs": 1,
        "probed": 1,
        "passing": 0,
        "failing": 1,
        "drained": 0,
    }
    assert serving["lastCheckTime"] == STAMP
    assert serving["failingPairs"] == [
        {
            "prefill": "m-prefill-a",
            "decode": "m-decode-a",
            "revision": "",
            "error": "decode failed: 500 X",
            "drained": False,
            "since": STAMP,
        }
    ]
    remediation = serving["lastRemediation"]
    assert (remediation["time"], remediation["action"], remediation["target"]) == (
        STAMP,
        "RecreatedEngine",
        "m-prefill-a",
    )
    assert remediation["reason"].startswith(
        "every pair through prefill m-prefill-a fails (m-prefill-a->m-decode-a: decode failed: 500 X)"
    )
    # The recorded remediation stays through the next rounds, which take nothing new.
    clock.now += 10
    await h.reconcile()
    assert h.status["serving"]["lastRemediation"] == remediation


async def test_one_failure_is_a_suspect_that_the_failing_list_does_not_name_yet() -> None:
    h, frontend, clock = await _serving()
    frontend.behaviour = lambda p, d: "decode failed: 500 X"
    clock.now += 10
    await h.reconcile()
    serving = h.status["serving"]
    assert "failingPairs" not in serving
    assert (serving["passing"], serving["failing"]) == (0, 0)


async def test_a_rollout_that_waits_reports_its_start_and_what_it_waits_for() -> None:
    h, _frontend, _clock = await _serving()
    rollout = h.status["rollout"]
    target = h.status["pairingRevision"]
    assert rollout == {
        "revision": target,
        "state": "RollingOut",
        # The fixture's engine pods carry no pairing revision: they are counted under "".
        "revisions": [{"revision": "", "prefill": 1, "decode": 1, "waitingPrefill": 0, "waitingDecode": 0}],
        "startedTime": STAMP,
        "waitingFor": f"revision {target}: 0 prefill and 0 decode ready, 0 and 0 up and being probed; older "
        "revisions  serve meanwhile",
    }


async def test_a_drained_pair_is_announced_recorded_and_its_return_announced_in_words() -> None:
    h, frontend, clock = await _serving_two_by_two()
    frontend.behaviour = lambda p, d: "timeout" if (p, d) == ("m-prefill-a", "m-decode-a") else True
    for step in (10, 2, 10):
        clock.now += step
        await h.reconcile()
    assert [e["message"] for e in h.events("DrainedPairs")] == [
        "the frontend no longer chooses m-prefill-a->m-decode-a: m-prefill-a->m-decode-a: timeout"
    ]
    assert h.status["serving"]["lastRemediation"] == {
        "time": STAMP,
        "action": "DrainedPairs",
        "target": "m-prefill-a->m-decode-a",
        "reason": "m-prefill-a->m-decode-a: timeout",
    }
    frontend.behaviour = lambda p, d: True
    clock.now += 10
    await h.reconcile()
    assert [e["message"] for e in h.events("UndrainedPairs")] == [
        "serving again, back in rotation: m-prefill-a->m-decode-a"
    ]


async def test_the_endpoint_check_says_where_it_asked_how_long_it_took_and_what_failed() -> None:
    document = MINIMAL.replace(
        "decode: {replicas: 1}",
        "decode: {replicas: 1}\n  serving: {check: {failureThreshold: 1}}\n"
        "  frontend: {router: {implementation: vllm-router}}",
    )
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    assert h.condition("Serving")["message"] == (
        "a completion through the router at 10.9.0.1:8000 answered in 0.05 s (endpoint check: which prefill/decode "
        "pairs work is only known with the operator's frontend)"
    )
    counts = ("pairs", "probed", "passing", "failing", "drained")
    assert h.status["serving"] == {
        "mode": "Enforce",
        "method": "endpoint",
        "lastCheckTime": STAMP,
        **dict(zip(counts, (1, 1, 1, 0, 0), strict=True)),
    }
    frontend.completions_ok = False
    clock.now += 10
    await h.reconcile()
    assert (
        h.condition("Serving")["message"] == "a completion through the router at 10.9.0.1:8000 failed: 502 Bad Gateway"
    )
    assert [h.status["serving"][k] for k in counts] == [0, 0, 0, 0, 0]


async def test_a_pass_between_rounds_reports_a_stuck_rollout_once_not_once_per_pass() -> None:
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "rollout: {progressDeadline: 1m}")
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    old_revision_pods(h)
    await h.reconcile()
    kubelet(h.server)
    frontend.behaviour = lambda p, d: p.endswith("old")
    for name, role in (("m-prefill-new", "prefill"), ("m-decode-new", "decode")):
        create_pod(h.server, "m", name, role, gated=True, revision=h.status["pairingRevision"])
    for _ in range(8):
        clock.now += 10
        await h.reconcile()
    assert h.condition("Degraded")["reason"] == "RolloutStuck"
    stuck = h.condition("Degraded")["message"]
    assert stuck.count("has not completed in 60 s") == 1
    for _ in range(3):  # passes before the next round is due reuse the last one
        clock.now += 1
        await h.reconcile()
    assert h.condition("Degraded")["message"].count("has not completed in 60 s") == 1


async def test_draining_many_pairs_names_the_first_ten_in_the_event() -> None:
    """Four prefills and four decodes: every pair but the four on the diagonal fails, and every engine still serves
    in its diagonal pair, so all twelve are drained; the event names ten of them (and the errors of three)."""
    document = FRONTEND.replace("prefill: {replicas: 1}", "prefill: {replicas: 4}").replace(
        "decode: {replicas: 1}", "decode: {replicas: 4}"
    )
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    letters = "abcd"
    for letter in letters:
        create_pod(h.server, "m", f"m-prefill-{letter}", "prefill", gated=True)
        create_pod(h.server, "m", f"m-decode-{letter}", "decode", gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert h.status["serving"]["passing"] == 16
    frontend.behaviour = lambda p, d: p[-1] == d[-1] or "timeout"
    for step in (10, 2):
        clock.now += step
        await h.reconcile()
    assert len(frontend.drains) == 12
    [event] = h.events("DrainedPairs")
    labels, _, errors = event["message"].removeprefix("the frontend no longer chooses ").partition(": ")
    assert len(labels.split(", ")) == 10
    assert errors.count(": timeout") == 3
