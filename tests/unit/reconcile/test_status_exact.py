"""The whole status of a ready DisaggDeployment, field by field and condition by condition, as `kubectl get -o
yaml` shows it: reasons and messages are what users and alerts read, so they are asserted exactly."""

from __future__ import annotations

from typing import Any

from tests.unit.reconcile.test_status import compute_status, live, observe, workload

NOW = "2026-11-30T00:00:00Z"


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_a_ready_deployment_reports_every_field_and_condition() -> None:
    status = compute_status(observe(live())).status
    assert conditions(status) == {
        "Ready": ("True", "AllReady", "prefill: 2/2 ready, decode: 1/1 ready, router: 1/1 ready"),
        "Progressing": ("False", "Settled", "nothing is rolling out or scaling"),
        "Degraded": ("False", "Healthy", "no failures observed"),
        "SpecValid": ("True", "Valid", "spec passed validation"),
    }
    assert all(c["lastTransitionTime"] == NOW and c["observedGeneration"] == 1 for c in status["conditions"])
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 1,
        "phase": "Ready",
        "endpoint": "http://m.ns.svc:8000",
        "modelFamily": "dense",
        "pairingRevision": status["pairingRevision"],
        "pairingGeneration": 1,
        "prefill": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "desiredReplicas": 2},
        "prefillReady": "2/2",
        "decode": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "desiredReplicas": 1},
        "decodeReady": "1/1",
        "router": {"replicas": 1, "readyReplicas": 1, "ready": True},
    }
    assert len(status["pairingRevision"]) == 10


def test_with_the_check_enforced_and_no_round_yet_ready_waits_for_serving_and_says_so() -> None:
    status = compute_status(observe(live(), serving_mode="Enforce")).status
    assert conditions(status) == {
        "Ready": ("False", "NotServing", "Serving is Unknown: no serving check has run yet"),
        "Serving": ("Unknown", "NotChecked", "no serving check has run yet"),
        "Progressing": ("False", "Settled", "nothing is rolling out or scaling"),
        "Degraded": ("False", "Healthy", "no failures observed"),
        "SpecValid": ("True", "Valid", "spec passed validation"),
    }
    assert status["phase"] == "Progressing"


def test_degraded_without_a_pool_waiting_points_ready_at_degraded() -> None:
    """A failure with every pool settled: Ready names the failure's reason and sends the reader to Degraded."""
    status = compute_status(observe(live(), apply_errors=["Deployment m-decode: 422 Invalid"])).status
    ready = conditions(status)["Ready"]
    assert ready == ("False", conditions(status)["Degraded"][1], "see Degraded")
    assert status["phase"] == "Degraded"


def test_a_pool_still_rolling_out_is_what_ready_and_progressing_name() -> None:
    children = live(decode=0, **{"m-decode": workload("m-decode", 1, 0)})
    status = compute_status(observe(children)).status
    found = conditions(status)
    assert found["Ready"][0:2] == ("False", "NotReady")
    assert found["Ready"][2] == found["Progressing"][2]
    assert found["Progressing"][0:2] == ("True", "Reconciling")
    assert "decode: 0/1 ready" in found["Progressing"][2]
