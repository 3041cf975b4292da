"""Status aggregation: what the DisaggDeployment says, given what its children report."""

from __future__ import annotations

import copy
from typing import Any

from disagg.api.errors import Problem
from disagg.plan import build_plan
from disagg.reconcile.conditions import ConditionUpdate, apply_conditions
from disagg.reconcile.status import StatusInputs, compute_status
from tests.support.rendering import deployment_from_yaml

SPEC = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: m, namespace: ns}
spec:
  model: {name: org/model}
  prefill: {replicas: 2}
  decode: {replicas: 1}
"""
PLAN = build_plan(deployment_from_yaml(SPEC), "ns")


def workload(
    name: str,
    desired: int,
    ready: int,
    updated: int | None = None,
    generation: int = 1,
    observed: int = 1,
    kind: str = "Deployment",
    **status: Any,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": name, "generation": generation},
        "spec": {"replicas": desired},
        "status": {
            "replicas": max(desired, ready),
            "readyReplicas": ready,
            "updatedReplicas": desired if updated is None else updated,
            "observedGeneration": observed,
            **status,
        },
    }


def live(prefill: int = 2, decode: int = 1, router: int = 1, **overrides: dict[str, Any]) -> dict[Any, Any]:
    objects = {
        "m-prefill": workload("m-prefill", 2, prefill),
        "m-decode": workload("m-decode", 1, decode),
        "m-router": workload("m-router", 1, router),
    }
    objects.update(overrides)
    return {("Deployment", name): obj for name, obj in objects.items()}


def observe(children: dict[Any, Any], previous: dict[str, Any] | None = None, **extra: Any) -> StatusInputs:
    return StatusInputs(
        generation=1, previous=previous or {}, now="2026-11-30T00:00:00Z", plan=PLAN, live=children, **extra
    )


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_ready_only_when_every_pool_and_the_router_are_ready() -> None:
    report = compute_status(observe(live()))
    assert report.phase == "Ready"
    assert condition(report.status, "Ready")["status"] == "True"
    assert report.status["prefillReady"] == "2/2" and report.status["decodeReady"] == "1/1"
    assert report.status["endpoint"] == "http://m.ns.svc:8000"
    for missing_ready in (live(prefill=1), live(decode=0), live(router=0)):
        report = compute_status(observe(missing_ready))
        assert condition(report.status, "Ready")["status"] == "False"
        assert report.phase in ("Progressing", "Pending")


def test_nothing_created_yet_is_pending() -> None:
    report = compute_status(observe({}))
    assert report.phase == "Pending"
    assert "not created yet" in condition(report.status, "Ready")["message"]


def test_a_rollout_in_progress_is_progressing_not_ready() -> None:
    rolling = live(**{"m-decode": workload("m-decode", 1, 1, updated=0, generation=2, observed=2)})
    report = compute_status(observe(rolling))
    assert report.phase == "Progressing"
    assert condition(report.status, "Progressing")["status"] == "True"
    assert "0 updated" in condition(report.status, "Progressing")["message"]


def test_a_stale_child_generation_is_not_ready() -> None:
    stale = live(**{"m-prefill": workload("m-prefill", 2, 2, generation=3, observed=2)})
    assert compute_status(observe(stale)).phase == "Progressing"


def test_losing_pods_after_being_ready_is_degraded_with_a_reason() -> None:
    ready = compute_status(observe(live())).status
    report = compute_status(observe(live(decode=0), previous=ready))
    assert report.phase == "Degraded"
    degraded = condition(report.status, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "PoolLostPods"
    assert "decode has 0/1 ready replicas (had 1)" in degraded["message"]
    replacement_not_created_yet = live(**{"m-decode": workload("m-decode", 1, 0, updated=0)})
    replacement_not_created_yet[("Deployment", "m-decode")]["status"]["replicas"] = 0
    still = compute_status(observe(replacement_not_created_yet, previous=report.status))
    assert condition(still.status, "Degraded")["reason"] == "PoolLostPods"  # through the gap, not Progressing
    assert any(t.type == "Degraded" and t.new == "True" for t in report.transitions)


def test_scaling_up_is_progressing_not_degraded() -> None:
    ready = compute_status(observe(live())).status
    scaled = live(**{"m-prefill": workload("m-prefill", 4, 2)})
    plan = build_plan(deployment_from_yaml(SPEC.replace("replicas: 2", "replicas: 4")), "ns")
    report = compute_status(StatusInputs(2, ready, "t", plan=plan, live=scaled))
    assert report.phase == "Progressing"
    assert condition(report.status, "Degraded")["status"] == "False"


def test_stuck_rollout_is_degraded() -> None:
    stuck = live(
        **{
            "m-decode": workload(
                "m-decode",
                1,
                0,
                updated=1,
                conditions=[
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": "timed out",
                    }
                ],
            )
        }
    )
    report = compute_status(observe(stuck))
    assert condition(report.status, "Degraded")["reason"] == "RolloutStuck"


def test_missing_api_and_apply_errors_are_degraded() -> None:
    report = compute_status(
        observe(
            live(), missing_apis=["LeaderWorkerSet is not installed"], apply_errors=["Deployment/m-decode: 422 Invalid"]
        )
    )
    degraded = condition(report.status, "Degraded")
    assert degraded["reason"] == "ApiMissing"
    assert "LeaderWorkerSet is not installed" in degraded["message"] and "422 Invalid" in degraded["message"]
    assert report.phase == "Degraded"


def test_unschedulable_pods_are_explained() -> None:
    pod = {
        "metadata": {"name": "m-decode-x", "labels": {"disagg.dev/role": "decode"}},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                }
            ]
        },
    }
    report = compute_status(observe(live(decode=0), pods=[pod]))
    progressing = condition(report.status, "Progressing")
    assert progressing["reason"] == "PodsNotRunning"
    assert "Insufficient nvidia.com/gpu" in progressing["message"]


def test_a_pool_with_all_its_replicas_ready_does_not_blame_a_pod_that_is_not() -> None:
    """A pod of a pool that has as many ready replicas as it wants, or more (a surge pod that cannot be scheduled, an
    old pod still there while the pool scales down), is no reason the pool is not ready: the message leaves it out."""
    waiting = {"reason": "CrashLoopBackOff", "message": "back-off"}
    pod = {
        "metadata": {"name": "m-decode-x", "labels": {"disagg.dev/role": "decode"}},
        "status": {"containerStatuses": [{"state": {"waiting": waiting}}]},
    }
    for ready in (1, 2):  # decode wants 1
        report = compute_status(observe(live(decode=ready), pods=[pod]))
        message = condition(report.status, "Ready")["message"]
        assert f"decode: {ready}/1 ready" in message and "CrashLoopBackOff" not in message, message


def test_an_invalid_spec_keeps_the_previous_picture_and_says_why() -> None:
    ready = compute_status(observe(live())).status
    problems = [Problem("spec.decode.tensorParallel", "6 is not a multiple of 4", "use 4 or 8")]
    report = compute_status(StatusInputs(2, copy.deepcopy(ready), "t2", problems=problems))
    assert report.phase == "Invalid" and report.status["observedGeneration"] == 2
    spec_valid = condition(report.status, "SpecValid")
    assert spec_valid["status"] == "False" and "spec.decode.tensorParallel" in spec_valid["message"]
    assert condition(report.status, "Ready") == condition(ready, "Ready")  # children untouched, still serving
    assert report.status["prefill"] == ready["prefill"]


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first, changes = apply_conditions([], [ConditionUpdate("Ready", "False", "NotReady", "a")], 1, "t1")
    assert [c.new for c in changes] == ["False"]
    second, changes = apply_conditions(first, [ConditionUpdate("Ready", "False", "NotReady", "b")], 2, "t2")
    assert second[0]["lastTransitionTime"] == "t1" and second[0]["message"] == "b" and changes == []
    third, changes = apply_conditions(second, [ConditionUpdate("Ready", "True", "AllReady", "c")], 2, "t3")
    assert third[0]["lastTransitionTime"] == "t3" and [(c.old, c.new) for c in changes] == [("False", "True")]


def test_a_condition_without_a_transition_time_gets_one_even_when_its_status_holds() -> None:
    """A condition written without lastTransitionTime (by hand, or by an older version) is given the time of this
    pass, not left without one: the field is required in a Kubernetes condition."""
    previous = [{"type": "Ready", "status": "False", "reason": "NotReady", "message": "a"}]
    conditions, changes = apply_conditions(previous, [ConditionUpdate("Ready", "False", "NotReady", "b")], 2, "t2")
    assert conditions[0]["lastTransitionTime"] == "t2" and changes == []


def test_autoscaled_pool_reports_the_live_desired_count() -> None:
    spec = SPEC.replace(
        "decode: {replicas: 1}", "decode: {replicas: 1, autoscaling: {enabled: true, controller: external}}"
    )
    plan = build_plan(deployment_from_yaml(spec), "ns")
    children = live(**{"m-decode": workload("m-decode", 3, 3)})
    report = compute_status(StatusInputs(1, {}, "t", plan=plan, live=children))
    assert report.status["decode"]["desiredReplicas"] == 3 and report.status["decodeReady"] == "3/3"
