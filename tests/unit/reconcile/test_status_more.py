"""More of what a DisaggDeployment's status says (mutation testing found these unasserted): the settled Progressing
condition, every degraded cause in the message, a pool whose workload is gone, and per-node daemons counted by the
nodes they are scheduled on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from disagg.plan import build_plan
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


def test_per_node_daemons_are_counted_by_the_nodes_they_are_scheduled_on() -> None:
    plan = build_plan(example_deployment(next(Path("examples").glob("17-*.yaml"))), "ns")
    children: dict[Any, Any] = {
        ("Deployment", w.name): workload(w.name, w.replicas, w.replicas)
        for w in plan.workloads
        if w.kind != "DaemonSet"
    }

    def phase(scheduled: int, ready: int) -> str:
        children[("DaemonSet", "qwen3-pegaflow-kv-node")] = daemons(scheduled, ready)
        inputs = StatusInputs(generation=1, previous={}, now="2026-11-30T00:00:00Z", plan=plan, live=children)
        return compute_status(inputs).phase

    assert phase(3, 3) == "Ready"  # three nodes, three daemons: the plan's 0 is not the count
    assert phase(3, 2) != "Ready"
