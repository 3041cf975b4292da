"""More of what a DisaggDeployment's status says (mutation testing found these unasserted): the settled Progressing
condition, every degraded cause in the message, a pool whose workload is gone, per-node daemons counted by the nodes
they are scheduled on and reported under kvNode, a pool's pod problems in the message, the Progressing reason without
them, and the Serving condition carried over from a pass that ran a round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from disagg.plan import build_plan
from disagg.reconcile.conditions import ConditionUpdate
from disagg.reconcile.status import StatusInputs, compute_status
from tests.support.rendering import example_deployment
from tests.unit.reconcile.test_status import condition, live, observe, workload


def test_a_ready_deployment_says_nothing_is_rolling_out() -> None:
    progressing = condition(compute_status(observe(live())).status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "Settled")
    assert progressing["message"] == "nothing is rolling out or scaling"


def test_the_degraded_message_lists_every_cause() -> None:
    report = compute_status(
        observe(live(), missing_apis=["LeaderWorkerSet is not installed"], apply_errors=["Deployment/x: 422 Invalid"])
    )
    assert (
        condition(report.status, "Degraded")["message"] == "LeaderWorkerSet is not installed; Deployment/x: 422 Invalid"
    )


def test_the_degraded_reason_is_the_first_cause_found_not_the_first_in_the_alphabet() -> None:
    """A name conflict is found before a missing API (the order of the message): it gives the reason."""
    causes = {"conflicts": ["Service m-router already exists"], "missing_apis": ["LeaderWorkerSet is not installed"]}
    report = compute_status(observe(live(), **causes))
    degraded = condition(report.status, "Degraded")
    assert degraded["reason"] == "NameConflict"
    assert degraded["message"] == "Service m-router already exists; LeaderWorkerSet is not installed"


def test_a_pool_whose_workload_is_gone_reports_nothing_ready() -> None:
    children = live()
    del children[("Deployment", "m-prefill")]
    status = compute_status(observe(children)).status
    assert status["prefill"] == {"replicas": 0, "readyReplicas": 0, "updatedReplicas": 0, "desiredReplicas": 2}
    assert status["prefillReady"] == "0/2"


def daemons(scheduled: int, ready: int) -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "qwen3-pegaflow-kv-node", "generation": 1},
        "spec": {},
        "status": {
            "desiredNumberScheduled": scheduled,
            "currentNumberScheduled": scheduled,
            "numberReady": ready,
            "updatedNumberScheduled": scheduled,
            "observedGeneration": 1,
        },
    }


def node_daemons_deployment() -> tuple[Any, dict[Any, Any]]:
    """examples/17 (per-node KV daemons) planned, with every Deployment of it ready and no DaemonSet yet."""
    plan = build_plan(example_deployment(next(Path("examples").glob("17-*.yaml"))), "ns")
    children: dict[Any, Any] = {
        ("Deployment", w.name): workload(w.name, w.replicas, w.replicas)
        for w in plan.workloads
        if w.kind != "DaemonSet"
    }
    return plan, children


def test_per_node_daemons_are_counted_by_the_nodes_they_are_scheduled_on() -> None:
    plan, children = node_daemons_deployment()

    def phase(scheduled: int, ready: int) -> str:
        children[("DaemonSet", "qwen3-pegaflow-kv-node")] = daemons(scheduled, ready)
        inputs = StatusInputs(generation=1, previous={}, now="2026-11-30T00:00:00Z", plan=plan, live=children)
        return compute_status(inputs).phase

    assert phase(3, 3) == "Ready"  # three nodes, three daemons: the plan's 0 is not the count
    assert phase(3, 2) != "Ready"


FAILING = ConditionUpdate("Serving", "False", "PairsFail", "no pair serves: decode failed: 500")


def serving_conditions(serving: str, degraded: str, reason: str = "ServingFailed") -> list[dict[str, Any]]:
    return [
        {"type": "Serving", "status": serving, "reason": "x", "message": "x"},
        {"type": "Degraded", "status": degraded, "reason": reason, "message": "x"},
    ]


def test_a_deployment_that_stopped_serving_stays_degraded_until_it_serves_again() -> None:
    """Served, then failing: Degraded (ServingFailed). The next pass, Serving was already False, but the Degraded
    condition still says why, so the deployment stays Degraded; one that never served is not Degraded for it."""
    for previous_serving, previous_degraded, reason, expected in (
        ("True", "False", "None", "True"),  # it served until now
        ("False", "True", "ServingFailed", "True"),  # it served before the last pass
        ("False", "True", "ApplyFailed", "False"),  # degraded for another reason, never served
        ("False", "False", "None", "False"),  # never served: not a loss
    ):
        previous = {"conditions": serving_conditions(previous_serving, previous_degraded, reason)}
        report = compute_status(observe(live(), previous, serving_mode="Enforce", serving_condition=FAILING))
        degraded = condition(report.status, "Degraded")
        assert degraded["status"] == expected, (previous_serving, previous_degraded, reason)
        if expected == "True":
            assert degraded["reason"] == "ServingFailed"
            assert degraded["message"] == f"the deployment served and no longer does: {FAILING.message}"


def test_a_lost_serving_behind_another_degraded_cause_is_still_remembered() -> None:
    # Degraded's reason names only the first cause (here an apply error); the loss of serving is in its message.
    previous = {
        "conditions": [
            {"type": "Serving", "status": "False", "reason": "x", "message": "x"},
            {
                "type": "Degraded",
                "status": "True",
                "reason": "ApplyFailed",
                "message": "Service m: 422 invalid; the deployment served and no longer does: no pair serves",
            },
        ]
    }
    report = compute_status(observe(live(), previous, serving_mode="Enforce", serving_condition=FAILING))
    degraded = condition(report.status, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ServingFailed"


def test_serving_replicas_are_kept_from_the_last_round_when_no_round_ran() -> None:
    previous = {"prefill": {"servingReplicas": 2}, "decode": {"servingReplicas": 1}}
    kept = compute_status(observe(live(), previous, serving_mode="Enforce")).status
    assert (kept["prefill"]["servingReplicas"], kept["decode"]["servingReplicas"]) == (2, 1)
    counted = compute_status(observe(live(), previous, serving_mode="Enforce", serving_engines={"prefill": 1})).status
    assert (counted["prefill"]["servingReplicas"], counted["decode"]["servingReplicas"]) == (1, 0)
    off = compute_status(observe(live(), previous, serving_mode="Off")).status
    assert "servingReplicas" not in off["prefill"] and "servingReplicas" not in off["decode"]


def test_the_per_node_daemons_report_their_counts_under_kv_node() -> None:
    plan, children = node_daemons_deployment()
    children[("DaemonSet", "qwen3-pegaflow-kv-node")] = daemons(3, 2)
    status = compute_status(StatusInputs(generation=1, previous={}, now="t", plan=plan, live=children)).status
    assert status["kvNode"] == {"replicas": 3, "readyReplicas": 2, "ready": False}


def unschedulable(name: str) -> dict[str, Any]:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no GPU"}
    return {"metadata": {"name": name, "labels": {"disagg.dev/role": "decode"}}, "status": {"conditions": [scheduled]}}


def test_a_pool_not_ready_names_its_first_pod_problem_and_counts_the_others() -> None:
    one = condition(compute_status(observe(live(decode=0), pods=[unschedulable("m-decode-a")])).status, "Progressing")
    assert "decode: 0/1 ready (pod m-decode-a unschedulable: no GPU)" in one["message"], one
    assert "more)" not in one["message"]
    pods = [unschedulable("m-decode-a"), unschedulable("m-decode-b"), unschedulable("m-decode-c")]
    three = condition(compute_status(observe(live(decode=0), pods=pods)).status, "Progressing")
    assert "decode: 0/1 ready (pod m-decode-a unschedulable: no GPU; and 2 more)" in three["message"], three


def test_a_pool_rolling_out_without_pod_problems_is_reconciling() -> None:
    rolling = live(**{"m-decode": workload("m-decode", 1, 1, updated=0, generation=2, observed=2)})
    progressing = condition(compute_status(observe(rolling)).status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Reconciling")
    assert progressing["message"] == "decode: 1/1 ready, 0 updated"


def test_without_a_round_this_pass_the_serving_condition_is_carried_over() -> None:
    serving = {"type": "Serving", "status": "True", "reason": "PairsServe", "message": "1 of 1 pairs serve"}
    status = compute_status(observe(live(), {"conditions": [serving]}, serving_mode="Enforce")).status
    carried = condition(status, "Serving")
    assert (carried["status"], carried["reason"], carried["message"]) == ("True", "PairsServe", "1 of 1 pairs serve")
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Serving", "Progressing", "Degraded", "SpecValid"]
    first = condition(compute_status(observe(live(), serving_mode="Enforce")).status, "Serving")
    assert (first["status"], first["reason"]) == ("Unknown", "NotChecked")
