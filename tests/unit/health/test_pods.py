"""Engine pods as the serving check reads them: incarnation, admission, candidates."""

from __future__ import annotations

from typing import Any

from disagg.health.pods import admitted_restarts, engine_pod, engine_pods, gate_message, owned_pods, owned_replica_sets
from disagg.names import SERVING_GATE
from tests.unit.health.podfactory import pod


def test_an_admitted_pod_is_routable_and_not_a_candidate() -> None:
    engine = engine_pod(pod("p0", "prefill", revision="abc", generation=3))
    assert engine is not None
    assert (engine.role, engine.revision, engine.generation, engine.restarts) == ("prefill", "abc", 3, 0)
    assert engine.admitted and engine.routable and not engine.candidate


def test_a_restarted_container_is_a_new_incarnation_the_old_admission_does_not_cover() -> None:
    engine = engine_pod(pod("d0", "decode", restarts=1, admitted_at=0))
    assert engine is not None
    assert engine.gate_status == "True" and not engine.admitted
    assert engine.candidate and not engine.routable


def test_a_pod_whose_containers_are_not_ready_is_neither_routable_nor_a_candidate() -> None:
    engine = engine_pod(pod("d0", "decode", up=False, admitted_at=None))
    assert engine is not None and not engine.candidate and not engine.routable


def test_without_the_gate_an_up_pod_is_admitted() -> None:
    engine = engine_pod(pod("d0", "decode", gated=False, admitted_at=None))
    assert engine is not None and engine.routable and not engine.gated


def test_only_prefill_and_decode_api_pods_are_engines() -> None:
    router = pod("r", "router")
    worker = pod("w", "decode")
    worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "1"
    leader = pod("l", "decode")
    leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    assert [e.name for e in engine_pods([router, worker, leader])] == ["l"]


def test_the_admitted_incarnation_is_read_back_from_the_condition_message() -> None:
    condition = {"type": SERVING_GATE, "status": "True", "message": gate_message(7, "pair x served")}
    assert admitted_restarts(condition) == 7
    assert admitted_restarts({**condition, "status": "False"}) is None
    assert admitted_restarts({"type": SERVING_GATE, "status": "True", "message": "set by hand"}) is None


def _controlled_by(name: str, kind: str, controller: str, uid: str = "") -> dict[str, Any]:
    reference = {"kind": kind, "name": controller, "uid": uid, "controller": True}
    return {"metadata": {"name": name, "ownerReferences": [reference]}}


def _replica_set(uid: str, deployment_uid: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "ownerReferences": [{"uid": deployment_uid, "controller": True}]}}


def test_only_pods_of_the_deployments_own_workloads_are_its_pods() -> None:
    replica_sets = [_replica_set("rs1", "dep1"), _replica_set("rs2", "someone-else")]
    pods = [
        _controlled_by("ours-deployment", "ReplicaSet", "m-decode-h1", uid="rs1"),
        _controlled_by("ours-leader", "StatefulSet", "m-prefill"),
        _controlled_by("ours-worker", "StatefulSet", "m-prefill-3"),
        _controlled_by("replica-set-named-like-ours", "ReplicaSet", "m-decode-h2", uid="rs2"),
        _controlled_by("replica-set-not-listed", "ReplicaSet", "m-decode-h3", uid="rs3"),
        _controlled_by("lookalike-statefulset", "StatefulSet", "m-prefill-x"),
        _controlled_by("statefulset-of-another", "StatefulSet", "m-decode"),
        _controlled_by("a-job", "Job", "m-prefill"),
        {"metadata": {"name": "bare"}},
    ]
    owned = [pod["metadata"]["name"] for pod in owned_pods(pods, ["dep1"], ["m-prefill"], replica_sets)]
    assert owned == ["ours-deployment", "ours-leader", "ours-worker"]
    assert owned_pods(pods, [], [], replica_sets) == []


def test_a_rollback_reads_only_replica_sets_the_deployment_controls() -> None:
    ours = {"metadata": {"name": "a", "ownerReferences": [{"uid": "d1", "controller": True}]}}
    theirs = {"metadata": {"name": "b", "ownerReferences": [{"uid": "d2", "controller": True}]}}
    not_controller = {"metadata": {"name": "c", "ownerReferences": [{"uid": "d1"}]}}
    assert owned_replica_sets([ours, theirs, not_controller], "d1") == [ours]
    assert owned_replica_sets([ours], "") == []
