"""Prune selection, replicas ownership and event selection: the reconciler's pure decisions."""

from __future__ import annotations

from typing import Any

from disagg.reconcile.children import pod_problems, select_prunable
from disagg.reconcile.conditions import Transition
from disagg.reconcile.events import event_object, notices_for
from disagg.reconcile.ownership import replicas_action, replicas_patch

UID = "uid-1"


def child(kind: str, name: str, owner: str | None = UID, **metadata: Any) -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True}] if owner else []
    return {"kind": kind, "metadata": {"name": name, "ownerReferences": refs, **metadata}}


def test_prune_removes_only_undesired_children_we_own() -> None:
    live = [
        child("Deployment", "m-prefill"),
        child("Deployment", "m-render"),  # render tier was turned off
        child("ConfigMap", "m-kv-config"),  # store removed
        child("Service", "m-lookalike", owner=None),  # our labels, not our owner reference
        child("Service", "m-other", owner="someone-else"),
        child("Deployment", "m-going", deletionTimestamp="2026-01-01T00:00:00Z"),
        child("Secret", "m-secret"),  # not a kind we manage
    ]
    desired = {("Deployment", "m-prefill")}
    pruned = [(obj["kind"], obj["metadata"]["name"]) for obj in select_prunable(desired, live, UID)]
    assert pruned == [("ConfigMap", "m-kv-config"), ("Deployment", "m-render")]


def _managed(manager: str, replicas: bool) -> dict[str, Any]:
    fields = {"f:spec": {"f:replicas": {}}} if replicas else {"f:spec": {"f:template": {}}}
    return {"manager": manager, "operation": "Apply", "fieldsV1": fields}


def test_spec_owned_replicas_are_always_applied() -> None:
    action = replicas_action(False, 3, None)
    assert action.include_in_main_apply and action.hand_over is None


def test_new_autoscaled_workload_is_created_with_the_spec_count_then_handed_over() -> None:
    action = replicas_action(True, 2, None)
    assert action.include_in_main_apply and action.hand_over == 2


def test_spec_owned_count_is_handed_over_at_its_live_value() -> None:
    live = {"metadata": {"managedFields": [_managed("disagg-operator", True)]}, "spec": {"replicas": 5}}
    action = replicas_action(True, 2, live)
    assert not action.include_in_main_apply and action.hand_over == 5


def test_count_owned_by_an_autoscaler_is_never_touched() -> None:
    live = {
        "metadata": {"managedFields": [_managed("disagg-operator", False), _managed("hpa", True)]},
        "spec": {"replicas": 7},
    }
    action = replicas_action(True, 2, live)
    assert not action.include_in_main_apply and action.hand_over is None


def test_replicas_patch_carries_only_the_count() -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "labels": {}},
        "spec": {"replicas": 1, "template": {}},
    }
    assert replicas_patch(obj, 4) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n"},
        "spec": {"replicas": 4},
    }


def test_crash_loops_are_reported_per_role() -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"disagg.dev/role": "prefill"}},
        "status": {
            "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m"}}}]
        },
    }
    assert pod_problems([pod]) == {"prefill": ["pod p CrashLoopBackOff: back-off 5m"]}


def test_only_changes_become_events() -> None:
    notices = notices_for(
        [
            Transition("SpecValid", "True", "False", "InvalidSpec", "spec.x: bad"),
            Transition("Ready", None, "False", "NotReady", "starting"),  # first observation: not news
            Transition("Degraded", "False", "True", "PoolLostPods", "decode lost"),
            Transition("Ready", "False", "True", "AllReady", "all ready"),
        ]
    )
    assert [(n.type, n.reason) for n in notices] == [
        ("Warning", "InvalidSpec"),
        ("Warning", "PoolLostPods"),
        ("Normal", "Ready"),
    ]


def test_event_object_points_at_the_deployment() -> None:
    owner = {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": UID},
    }
    event = event_object(owner, notices_for([Transition("Ready", "False", "True", "AllReady", "ok")])[0], "t", "pod")
    assert event["involvedObject"]["uid"] == UID and event["type"] == "Normal" and event["reason"] == "Ready"
    assert event["metadata"]["generateName"] == "m."


def test_pod_problems_are_listed_by_pod_name_whatever_order_the_cache_gives() -> None:
    """A status message that changed with the cache's order would be a new status write on every pass."""

    def unschedulable(name: str) -> dict[str, Any]:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes"}
        return {
            "metadata": {"name": name, "labels": {"disagg.dev/role": "decode"}},
            "status": {"conditions": [condition]},
        }

    names = ["m-decode-c", "m-decode-a", "m-decode-b"]
    expected = {"decode": [f"pod {name} unschedulable: 0/8 nodes" for name in sorted(names)]}
    assert pod_problems([unschedulable(name) for name in names]) == expected
    assert pod_problems([unschedulable(name) for name in reversed(names)]) == expected


def test_a_pod_skipped_does_not_hide_the_problems_of_the_pods_after_it() -> None:
    """A pod without a role label and a terminating pod say nothing, and the pods sorted after them are still read."""

    def crashing(name: str, **metadata: Any) -> dict[str, Any]:
        waiting = {"reason": "CrashLoopBackOff", "message": "back-off 5m"}
        return {
            "metadata": {"name": name, "labels": {"disagg.dev/role": "decode"}, **metadata},
            "status": {"containerStatuses": [{"state": {"waiting": waiting}}]},
        }

    pods = [
        crashing("a-unlabelled", labels={}),
        crashing("b-terminating", deletionTimestamp="2026-01-01T00:00:00Z"),
        crashing("c-running"),
    ]
    assert pod_problems(pods) == {"decode": ["pod c-running CrashLoopBackOff: back-off 5m"]}


def test_a_waiting_container_s_message_is_kept_to_its_last_character() -> None:
    """Only the ": " left by a waiting reason without a message is cut; a message's own last characters stay."""

    def waiting(message: str | None) -> dict[str, Any]:
        state = {"reason": "ErrImagePull"} | ({"message": message} if message is not None else {})
        return {
            "metadata": {"name": "p", "labels": {"disagg.dev/role": "prefill"}},
            "status": {"containerStatuses": [{"state": {"waiting": state}}]},
        }

    assert pod_problems([waiting("pull access denied for registry.local/team-X")]) == {
        "prefill": ["pod p ErrImagePull: pull access denied for registry.local/team-X"]
    }
    assert pod_problems([waiting(None)]) == {"prefill": ["pod p ErrImagePull"]}
