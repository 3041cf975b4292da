"""The serving check through whole passes: Serving, Ready requiring it, pods admitted by the gate, restarts,
remediation, the endpoint check for routers that cannot probe pairs, and the modes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from disagg.names import KIND, SERVING_GATE
from disagg.reconcile.kube import NotLeader
from disagg.reconcile.metrics import REGISTRY
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness
from tests.support.serving import (
    Clock,
    FakeFrontend,
    checked_harness,
    controlled,
    create_pod,
    kubelet,
    make_pod,
    restart,
)

FRONTEND = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: m}
spec:
  model: {name: org/model}
  prefill: {replicas: 1}
  decode: {replicas: 1}
  serving:
    check: {interval: 10s, failureThreshold: 2}
    remediation: {cooldown: 2m}
  frontend:
    router:
      # The operator's own frontend, recognised by its admin port (the planner renders it as the default once the
      # frontend rendering lands; a custom container running `disagg frontend` is recognised the same way).
      customContainer:
        image: ghcr.io/disagg-dev/disagg-operator:0.1.0
        command: [disagg, frontend]
        args: [--deployment, m]
        extraPorts: {admin: 8001}
"""


def gate(h: Any, name: str) -> dict[str, Any]:
    pod = h.server.get("Pod", NAMESPACE, name)
    return next((c for c in pod["status"]["conditions"] if c["type"] == SERVING_GATE), {})


def old_revision_pods(h: Any) -> None:
    """A prefill and a decode engine of pairing revision "old" (gated) and a frontend, settled into the cache."""
    for name, role in (("m-prefill-old", "prefill"), ("m-decode-old", "decode")):
        create_pod(h.server, "m", name, role, gated=True, revision="old")
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()


def old_replica_set(h: Any, role: str) -> None:
    """What the Deployment controller kept of the pool's previous template, pairing revision "old" (image
    vllm:old): its ReplicaSet, with its own hash label."""
    deployment = h.server.get("Deployment", NAMESPACE, f"m-{role}")
    template = deployment["spec"]["template"]
    template["metadata"]["labels"].update({"disagg.dev/pairing-revision": "old", "pod-template-hash": "h1"})
    template["spec"]["containers"][0]["image"] = "vllm:old"
    h.server.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"m-{role}-h1",
                "namespace": NAMESPACE,
                # The Deployment controller labels a ReplicaSet with its template's labels (managed-by too).
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {"deployment.kubernetes.io/revision": "1"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": f"m-{role}",
                        "uid": deployment["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"template": template},
        }
    )


def reasons(h: Any) -> list[str]:
    return [e["reason"] for e in h.events() if e["reason"] not in ("Created",)]


async def test_engines_become_ready_only_once_a_pair_through_them_serves_then_serving_is_true() -> None:
    h, frontend, clock = checked_harness(deployment_document(FRONTEND))
    await h.reconcile()
    workload = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert workload["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": SERVING_GATE}]
    assert workload["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "100%", "maxUnavailable": 0}
    for name, role in (("m-prefill-a", "prefill"), ("m-decode-a", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    # Both engines were probed as a candidate pair and admitted together.
    assert frontend.probed[-1] == [("m-prefill-a", "m-decode-a")]
    assert gate(h, "m-prefill-a")["status"] == "True" and gate(h, "m-decode-a")["status"] == "True"
    assert gate(h, "m-decode-a")["message"].startswith("restarts=0; ")
    assert h.condition("Serving")["reason"] == "NoPairs"  # admitted this pass; the kubelet has not said Ready yet
    assert h.condition("Ready")["status"] == "False"
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("True", "PairsServe"), serving
    assert h.condition("Ready")["status"] == "True" and h.status["phase"] == "Ready"
    assert h.status["serving"]["pairs"] == 1 and h.status["serving"]["method"] == "pairs"
    assert h.status["decode"]["servingReplicas"] == 1
    assert "EnginesAdmitted" in reasons(h) and reasons(h)[-2:] == ["Serving", "Ready"]


async def test_a_running_frontend_that_is_not_ready_yet_is_checked_so_the_first_engines_can_be_admitted() -> None:
    # The operator's frontend is Ready only with a routable pair, and engines become routable only once a pair
    # through them passed: waiting for a Ready frontend would wait forever.
    h, frontend, clock = checked_harness(deployment_document(FRONTEND))
    await h.reconcile()
    for name, role in (("m-prefill-a", "prefill"), ("m-decode-a", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ready=False, ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    assert frontend.probed[-1] == [("m-prefill-a", "m-decode-a")]
    assert gate(h, "m-prefill-a")["status"] == "True" and gate(h, "m-decode-a")["status"] == "True"
    # A frontend pod that is not running (no IP yet) is not asked.
    pending = make_pod("m", "m-router-b", "router", ready=False, ip="")
    pending["status"]["phase"] = "Pending"
    h.server.remove("Pod", NAMESPACE, "m-router-a")
    h.server.create(controlled(h.server, pending))
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("False", "NoFrontend"), serving


async def _serving(document: str = FRONTEND, **frontend: Any) -> tuple[Any, Any, Any]:
    h, fake, clock = checked_harness(deployment_document(document), **frontend)
    await h.reconcile()
    for name, role in (("m-prefill-a", "prefill"), ("m-decode-a", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True"
    return h, fake, clock


async def _serving_two_by_two(**frontend: Any) -> tuple[Any, Any, Any]:
    """Two prefills, two decodes and two routers, every engine admitted after one round of checks."""
    document = FRONTEND.replace("prefill: {replicas: 1}", "prefill: {replicas: 2}").replace(
        "decode: {replicas: 1}", "decode: {replicas: 2}"
    )
    h, fake, clock = checked_harness(deployment_document(document), **frontend)
    await h.reconcile()
    for name, role in (
        ("m-prefill-a", "prefill"),
        ("m-prefill-b", "prefill"),
        ("m-decode-a", "decode"),
        ("m-decode-b", "decode"),
    ):
        create_pod(h.server, "m", name, role, gated=True)
    for name, ip in (("m-router-a", "10.9.0.1"), ("m-router-b", "10.9.0.2")):
        create_pod(h.server, "m", name, "router", ip=ip)
    h.settle()
    await h.reconcile()
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    return h, fake, clock


async def test_a_broken_pair_turns_serving_false_within_one_recheck_and_the_stale_engine_is_recreated() -> None:
    h, frontend, clock = await _serving()
    frontend.behaviour = lambda p, d: "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT"
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True"  # one failure: re-checked in 2 s rather than reported
    assert h.status["serving"]["passing"] == 0
    clock.now += 2
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("False", "PairsFailing")
    assert "m-prefill-a->m-decode-a: decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT" in serving["message"]
    assert h.condition("Ready")["reason"] == "ServingFailed" and h.status["phase"] == "Degraded"
    # Both engines serve nothing; the newest incarnation is replaced (here: equal start, the later name wins).
    remaining = {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)}
    assert len(remaining & {"m-prefill-a", "m-decode-a"}) == 1
    assert h.status["serving"]["lastRemediation"]["action"] == "RecreatedEngine"
    assert [r for r in reasons(h) if r in ("NotServing", "RecreatedEngine")] == ["RecreatedEngine", "NotServing"]
    # Within the cooldown nothing else is deleted, however often the check runs.
    clock.now += 10
    await h.reconcile()
    assert len({p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)}) == 2


async def test_a_new_leader_keeps_the_replacement_cooldown_the_previous_one_wrote_to_status() -> None:
    h, frontend, clock = await _serving()
    frontend.behaviour = lambda p, d: "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT"
    for step in (10, 2):
        clock.now += step
        await h.reconcile()
    engines = {"m-prefill-a", "m-decode-a"}
    survivors = {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)} & engines
    assert len(survivors) == 1
    replacements = h.status["serving"]["replacements"]
    assert replacements["unrecovered"] == 1 and replacements["lastReplacementTime"].endswith("Z")
    (survivor,) = survivors
    # The workload's new pod comes up and every pair through it fails too: a takeover drops the in-process memory
    # (reconciler.py), and the new leader reads the cooldown back from status instead of replacing at once.
    role = "decode" if survivor.startswith("m-prefill") else "prefill"
    create_pod(h.server, "m", f"m-{role}-b", role)
    h.settle()
    assert h.reconciler.serving is not None
    h.reconciler.serving.memory.clear()
    for step in (10, 2, 2):
        clock.now += step
        await h.reconcile()
    names = {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)}
    assert {survivor, f"m-{role}-b"} <= names, "replaced again within the cooldown after a takeover"
    held = [e["message"] for e in h.events() if e["reason"] == "RemediationHeld"]
    assert any("cooldown has" in message for message in held), held
    # Past the doubled cooldown (one replacement did not bring Serving back: 2 x 2m) it acts again.
    clock.now += 240
    await h.reconcile()
    clock.now += 2
    await h.reconcile()
    names = {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)}
    assert len(names & {survivor, f"m-{role}-b"}) == 1
    assert h.status["serving"]["replacements"]["unrecovered"] == 2


async def test_report_only_remediation_deletes_nothing_and_says_what_it_would_do() -> None:
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "remediation: {action: Report}")
    h, frontend, clock = await _serving(document)
    frontend.behaviour = lambda p, d: False
    for _ in range(3):
        clock.now += 10
        await h.reconcile()
    assert {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)} >= {"m-prefill-a", "m-decode-a"}
    held = [e for e in h.events() if e["reason"] == "RemediationHeld"]
    assert len(held) == 1 and "would replace pod" in held[0]["message"] and "action is Report" in held[0]["message"]


async def test_a_restarted_engine_is_unready_until_its_pairs_pass_again() -> None:
    h, _frontend, clock = await _serving()
    restart(h.server, "m-decode-a")
    await h.reconcile()  # the Deployment's ready count changed: a pass, not yet a round
    assert gate(h, "m-decode-a")["status"] == "False" and gate(h, "m-decode-a")["reason"] == "Restarted"
    # What `kubectl describe pod` shows: why the pod is unready and what ends it.
    assert gate(h, "m-decode-a")["message"] == "restarts=1; restarted; ready again once its pairs pass"
    [warning] = [e for e in h.events() if e["reason"] == "EngineRestarted"]
    assert warning["type"] == "Warning"
    assert warning["message"] == (
        "decode pod m-decode-a restarted (restarts=1): not ready until a pair through it passes the serving check"
    )
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert gate(h, "m-decode-a")["status"] == "True"
    assert gate(h, "m-decode-a")["message"].startswith("restarts=1; ")


async def test_a_restarted_prefill_whose_pairs_keep_failing_is_recreated_while_a_new_engine_would_wait() -> None:
    # D105 under the gate: the restarted prefill is a candidate again, and its decode holds stale NIXL state about
    # it, so every probe through it fails. Candidates are not routed, yet this one served before: it is replaced.
    h, frontend, clock = await _serving()
    restart(h.server, "m-prefill-a")
    await h.reconcile()
    assert gate(h, "m-prefill-a")["status"] == "False"
    kubelet(h.server)
    frontend.behaviour = lambda p, d: "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT" if p == "m-prefill-a" else True
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("False", "NoPairs")
    assert "NIXL_ERR_REMOTE_DISCONNECT" in serving["message"]
    assert h.server.get("Pod", NAMESPACE, "m-prefill-a") is not None  # one failure: re-checked in 2 s
    clock.now += 2
    await h.reconcile()
    assert h.server.get("Pod", NAMESPACE, "m-prefill-a") is None
    assert h.status["serving"]["lastRemediation"]["target"] == "m-prefill-a"
    assert "RecreatedEngine" in reasons(h)


async def test_a_pass_between_rounds_comes_back_when_the_next_round_is_due_not_a_whole_interval_later() -> None:
    h, frontend, clock = await _serving()  # a round just ran; the check's interval is 10 s
    rounds, ran_at = len(frontend.probed), clock.now
    due = h.reconciler.queue.due_in(h.key)
    assert due is not None and 9 < due <= 10
    for elapsed in (4, 7):  # passes between rounds (a pod changed, say) count down to the next round
        clock.now = ran_at + elapsed
        await h.reconcile()
        assert len(frontend.probed) == rounds  # no round ran
        due = h.reconciler.queue.due_in(h.key)
        assert due is not None and due <= 10 - elapsed + 0.01, (elapsed, due)


def check_rounds_timed(method: str) -> float:
    return REGISTRY.get_sample_value("disagg_serving_check_duration_seconds_count", {"method": method}) or 0.0


async def test_a_round_is_timed_under_its_check_method() -> None:
    h, _, clock = await _serving()
    pairs, endpoint = check_rounds_timed("pairs"), check_rounds_timed("endpoint")
    clock.now += 10
    await h.reconcile()
    assert (check_rounds_timed("pairs"), check_rounds_timed("endpoint")) == (pairs + 1, endpoint)


async def test_an_unreachable_admin_api_is_unknown_and_not_ready() -> None:
    h, frontend, clock = await _serving()
    assert REGISTRY.get_sample_value("disagg_serving", {"namespace": NAMESPACE, "name": "m"}) == 1
    frontend.reachable = False
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("Unknown", "CheckFailed")
    assert "did not answer the check" in serving["message"]
    assert h.condition("Ready")["reason"] == "NotServing"
    # disagg_serving: 1 True, 0 False, -1 Unknown
    assert REGISTRY.get_sample_value("disagg_serving", {"namespace": NAMESPACE, "name": "m"}) == -1


async def test_vllm_router_gets_the_endpoint_check_without_gates() -> None:
    document = MINIMAL.replace(
        "decode: {replicas: 1}",
        "decode: {replicas: 1}\n  serving: {check: {failureThreshold: 1}}\n"
        "  frontend: {router: {implementation: vllm-router}}",
    )
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert "readinessGates" not in decode["spec"]["template"]["spec"]
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("True", "EndpointServes")
    assert "which prefill/decode pairs work is only known with the operator's frontend" in serving["message"]
    assert h.status["phase"] == "Ready" and "servingReplicas" not in h.status["decode"]
    frontend.completions_ok = False
    clock.now += 10
    await h.reconcile()
    assert (h.condition("Serving")["status"], h.condition("Serving")["reason"]) == ("False", "EndpointFailing")
    assert h.status["phase"] == "Degraded" and h.condition("Degraded")["reason"] == "ServingFailed"


async def test_a_deleted_deployment_checked_by_its_endpoint_leaves_no_serving_gauge_behind() -> None:
    """The endpoint check sets disagg_serving but never the per-pair gauges: forgetting the deployment removes what
    was set and does not trip over what never was."""
    document = MINIMAL.replace(
        "decode: {replicas: 1}", "decode: {replicas: 1}\n  frontend: {router: {implementation: vllm-router}}"
    )
    h, _, _ = checked_harness(deployment_document(document, name="endpoint-only"))
    await h.reconcile()
    create_pod(h.server, "endpoint-only", "endpoint-only-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    labels = {"namespace": NAMESPACE, "name": "endpoint-only"}
    assert REGISTRY.get_sample_value("disagg_serving", labels) == 1
    assert REGISTRY.get_sample_value("disagg_serving_pairs", {**labels, "state": "passing"}) is None
    h.server.remove(KIND, NAMESPACE, "endpoint-only")
    assert await h.reconcile() == "gone"
    assert REGISTRY.get_sample_value("disagg_serving", labels) is None


async def test_without_a_router_only_the_api_pods_of_a_multi_node_decode_pool_are_asked() -> None:
    """With no router (a custom connector naming no P/D protocol), the check asks decode's own endpoint: in a
    multi-node pool that is each replica's leader; its workers carry the role label, run --headless and serve no HTTP,
    so asking them would fail the check."""
    document = MINIMAL.replace(
        "decode: {replicas: 1}",
        "decode: {replicas: 1, dataParallel: 2, nodesPerReplica: 2}\n"
        "  transfer: {connector: custom, custom: {connectorClass: ExampleConnector}}",
    )
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    assert h.server.get("LeaderWorkerSet", NAMESPACE, "m-decode") is not None
    for name, index, statefulset, ip in (
        ("m-decode-0", "0", "m-decode", "10.1.0.1"),
        ("m-decode-0-1", "1", "m-decode-0", "10.1.0.2"),
    ):
        pod = make_pod("m", name, "decode", ip=ip)
        pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = index
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": statefulset,
                "uid": f"uid-{statefulset}",
                "controller": True,
            }
        ]
        h.server.create(pod)
    h.settle()
    for _ in range(2):
        clock.now += 10
        await h.reconcile()
    assert frontend.completed and set(frontend.completed) == {"10.1.0.1"}
    assert h.condition("Serving")["status"] == "True"


async def test_report_mode_reports_serving_but_ready_means_pods() -> None:
    document = MINIMAL.replace("decode: {replicas: 1}", "decode: {replicas: 1}\n  serving: {check: {mode: Report}}")
    h, _frontend, _clock = checked_harness(deployment_document(document), completions_ok=False)
    await h.reconcile()
    h.settle()
    await h.reconcile()
    assert h.condition("Serving")["reason"] == "NoFrontend"
    assert h.condition("Serving")["status"] == "False" and h.status["phase"] == "Ready"


SERVING_COUNTS = ("pairs", "probed", "passing", "failing", "drained")
"""The serving check's counts, which the CRD's status schema defaults to 0."""


async def test_off_mode_is_unknown_with_the_reason() -> None:
    document = MINIMAL.replace("decode: {replicas: 1}", "decode: {replicas: 1}\n  serving: {check: {mode: 'Off'}}")
    h, frontend, _clock = checked_harness(deployment_document(document))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("Unknown", "CheckDisabled")
    assert h.status["phase"] == "Ready" and frontend.completions == 0
    # As stored: the API server fills the CRD's defaults for the counts the operator leaves out.
    assert h.status["serving"] == {"mode": "Off", "method": "pairs", **dict.fromkeys(SERVING_COUNTS, 0)}


async def test_a_settled_pass_with_the_check_off_writes_no_status() -> None:
    """The status the pass computes omits what the CRD defaults (the check's counts): compared as stored (D252), a
    pass that changes nothing sends nothing, where it used to send a status patch on every pass."""
    document = MINIMAL.replace("decode: {replicas: 1}", "decode: {replicas: 1}\n  serving: {check: {mode: 'Off'}}")
    h, _frontend, _clock = checked_harness(deployment_document(document))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    await h.reconcile()
    written = [r for r in h.server.requests if r.method == "PATCH" and r.path.endswith("/status")]
    h.settle(**{"m-decode": 0})  # a report that changes the status
    h.settle()  # and one that changes it back: the pass computes the status the DisaggDeployment already has
    assert await h.reconcile() == "ok"
    assert [r for r in h.server.requests if r.method == "PATCH" and r.path.endswith("/status")] == written


async def test_no_frontend_pod_is_not_serving() -> None:
    h, _frontend, _clock = checked_harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("False", "NoFrontend")
    assert h.condition("Ready")["reason"] == "NotServing" and h.status["phase"] == "Progressing"


async def test_a_pair_failing_between_engines_that_serve_elsewhere_is_drained_then_undrained() -> None:
    h, frontend, clock = await _serving_two_by_two()
    assert h.condition("Serving")["status"] == "True" and h.status["serving"]["pairs"] == 4
    frontend.behaviour = lambda p, d: "timeout" if (p, d) == ("m-prefill-a", "m-decode-a") else True
    clock.now += 10
    await h.reconcile()
    clock.now += 2
    await h.reconcile()
    # Drained on both frontend replicas; the other three pairs serve, so Serving holds and Degraded says why.
    assert sorted(frontend.drains) == [
        ("10.9.0.1", "m-prefill-a", "m-decode-a"),
        ("10.9.0.2", "m-prefill-a", "m-decode-a"),
    ]
    assert h.condition("Serving")["status"] == "False"  # the round that drained it still saw it routable
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True" and "1 failing pairs drained" in h.condition("Serving")["message"]
    assert h.condition("Degraded")["reason"] == "PairsDrained" and h.status["serving"]["drained"] == 1
    assert len(h.server.objects("Pod", NAMESPACE)) == 6  # nothing deleted: both engines serve in other pairs
    assert [e["type"] for e in h.events("DrainedPairs")] == ["Warning"]
    undrained = REGISTRY.get_sample_value("disagg_remediations_total", {"action": "undrained"}) or 0.0
    frontend.behaviour = lambda p, d: True
    clock.now += 10
    await h.reconcile()
    assert frontend.undrains and h.condition("Degraded")["status"] == "False"
    assert "UndrainedPairs" in reasons(h)
    assert [e["type"] for e in h.events("UndrainedPairs")] == ["Normal"]
    # The one pair drained is undrained (once, whichever frontends held it).
    assert REGISTRY.get_sample_value("disagg_remediations_total", {"action": "undrained"}) == undrained + 1


async def test_a_rollout_admits_the_new_revision_in_both_pools_together_and_reports_it() -> None:
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "rollout: {progressDeadline: 1m}")
    h, _frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    new = h.status["pairingRevision"]  # the planner's revision (plan/pairing.py), on the new pod templates
    assert new and h.status["rollout"]["revision"] == new
    # The old revision serves.
    old_revision_pods(h)
    await h.reconcile()
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True"
    waiting = "up and being probed; older revisions old serve meanwhile"
    assert h.status["rollout"]["waitingFor"] == f"revision {new}: 0 prefill and 0 decode ready, 0 and 0 {waiting}"
    # The new revision's decode comes up first: it passes nothing (no new prefill yet) and stays unready.
    create_pod(h.server, "m", "m-decode-new", "decode", gated=True, revision=new)
    await h.reconcile()
    assert gate(h, "m-decode-new") == {}
    rollout = h.status["rollout"]
    assert rollout["waitingFor"] == f"revision {new}: 0 prefill and 0 decode ready, 0 and 1 {waiting}"
    assert rollout["state"] == "RollingOut" and rollout["revision"] == new
    rows = {
        r["revision"]: (r["prefill"], r["decode"], r["waitingPrefill"], r["waitingDecode"])
        for r in rollout["revisions"]
    }
    assert rows == {"old": (1, 1, 0, 0), new: (0, 0, 0, 1)}
    assert "older revisions old serve meanwhile" in rollout["waitingFor"]
    # Its prefill comes up: the new pair passes, both are admitted in the same pass.
    create_pod(h.server, "m", "m-prefill-new", "prefill", gated=True, revision=new)
    await h.reconcile()
    assert gate(h, "m-decode-new")["status"] == "True" and gate(h, "m-prefill-new")["status"] == "True"
    # The Deployments remove the old pods: the rollout is complete.
    for name in ("m-prefill-old", "m-decode-old"):
        h.server.remove("Pod", NAMESPACE, name)
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert h.status["rollout"]["state"] == "Complete" and h.condition("Serving")["status"] == "True"


async def test_a_rollout_whose_new_pods_never_serve_is_stuck_and_the_old_revision_keeps_serving() -> None:
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "rollout: {progressDeadline: 1m}")
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    old_revision_pods(h)
    await h.reconcile()
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    frontend.behaviour = lambda p, d: True if p.endswith("old") else "decode failed: 500 KV cache layout mismatch"
    for name, role in (("m-prefill-new", "prefill"), ("m-decode-new", "decode")):
        create_pod(h.server, "m", name, role, gated=True, revision=h.status["pairingRevision"])
    for _ in range(8):
        clock.now += 10
        await h.reconcile()
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "RolloutStuck", degraded
    assert (
        f"the rollout to pairing revision {h.status['pairingRevision']} has not completed in 60 s"
        f" (revision {h.status['pairingRevision']}: 0 prefill and 0 decode ready, 1 and 1 up and being probed;"
        " older revisions old serve meanwhile)" in degraded["message"]
    )
    assert h.status["rollout"]["state"] == "Stuck"
    assert h.condition("Serving")["status"] == "True"  # the old pair still serves
    assert gate(h, "m-decode-new") == {} and gate(h, "m-prefill-new") == {}


async def stuck_rollout(*kept_templates: str) -> tuple[Harness, FakeFrontend, Clock]:
    """A rollout whose new pairing revision never serves (onStuck: Rollback), with previous templates kept by a
    ReplicaSet for the pools named, driven past its progress deadline."""
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "rollout: {progressDeadline: 1m, onStuck: Rollback}")
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    for role in kept_templates:
        old_replica_set(h, role)
    old_revision_pods(h)
    await h.reconcile()
    kubelet(h.server)
    frontend.behaviour = lambda p, d: True if p.endswith("old") else "decode failed: 500"
    for name, role in (("m-prefill-new", "prefill"), ("m-decode-new", "decode")):
        create_pod(h.server, "m", name, role, gated=True, revision=h.status["pairingRevision"])
    for _ in range(8):
        clock.now += 10
        await h.reconcile()
    return h, frontend, clock


async def test_a_stuck_rollout_rolls_back_to_the_serving_templates_only_when_the_spec_says_so() -> None:
    h, _, clock = await stuck_rollout("prefill", "decode")
    rollout = h.status["rollout"]
    assert (rollout["state"], rollout["rolledBackTo"], rollout["rolledBackGeneration"]) == ("RolledBack", "old", 1)
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    labels = decode["spec"]["template"]["metadata"]["labels"]
    assert labels["disagg.dev/pairing-revision"] == "old" and "pod-template-hash" not in labels
    assert decode["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm:old"
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "RolledBack"
    # It says why the pools run old templates, which setting did it, and what ends it.
    assert degraded["message"] == (
        "the rollout of the spec's pairing revision was stuck and is rolled back to revision old "
        "(spec.serving.rollout.onStuck: Rollback); the pools run the previous pod templates until the spec changes"
    )
    assert "RollingBack" in reasons(h)
    # Rolled back, the Deployments run the old revision: the hold keeps it from their own templates, whatever the
    # watch cache holds of ReplicaSets (none here, as when it has not caught up with them).
    for role in ("prefill", "decode"):
        h.server.remove("ReplicaSet", NAMESPACE, f"m-{role}-h1")
    clock.now += 10
    await h.reconcile()
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert decode["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm:old"
    assert h.condition("Degraded")["reason"] == "RolledBack", h.condition("Degraded")
    # A new spec is a new rollout: the spec's template is applied again.
    h.edit_spec(lambda spec: spec["decode"].update(replicas=2))
    await h.reconcile()
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert decode["spec"]["template"]["spec"]["containers"][0]["image"] != "vllm:old"


async def test_a_rollback_holds_every_pool_it_has_a_template_for_even_after_one_it_has_none_for() -> None:
    """The decode pool's previous template is gone (no ReplicaSet kept it): the rollback says so and still holds the
    prefill pool, rendered after it, on its previous template."""
    h, _, _ = await stuck_rollout("prefill")
    assert h.status["rollout"]["state"] == "RolledBack"
    image = {
        role: h.server.get("Deployment", NAMESPACE, f"m-{role}")["spec"]["template"]["spec"]["containers"][0]["image"]
        for role in ("prefill", "decode")
    }
    assert image["prefill"] == "vllm:old" and image["decode"] != "vllm:old", image
    messages = [c["message"] for c in h.status["conditions"] if c["type"] == "Degraded"]
    assert "rolling back m-decode: no ReplicaSet runs pairing revision old any more" in messages[0], messages


async def test_without_rollback_a_stuck_rollout_keeps_the_spec_templates() -> None:
    document = FRONTEND.replace("remediation: {cooldown: 2m}", "rollout: {progressDeadline: 1m}")
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    before = h.server.get("Deployment", NAMESPACE, "m-decode")["spec"]["template"]
    old_revision_pods(h)
    kubelet(h.server)
    frontend.behaviour = lambda p, d: p.endswith("old")
    for name, role in (("m-prefill-new", "prefill"), ("m-decode-new", "decode")):
        create_pod(h.server, "m", name, role, gated=True, revision=h.status["pairingRevision"])
    for _ in range(8):
        clock.now += 10
        await h.reconcile()
    assert h.status["rollout"]["state"] == "Stuck" and "rolledBackTo" not in h.status["rollout"]
    assert h.server.get("Deployment", NAMESPACE, "m-decode")["spec"]["template"] == before


async def test_a_pod_labelled_like_an_engine_but_not_of_its_workloads_is_never_probed_gated_or_deleted() -> None:
    """D70: labels are not ownership. A pod that looks like an admitted decode engine (our labels, our gate
    condition) under a ReplicaSet the pool Deployment does not control fails every pair: the operator leaves it."""
    h, frontend, clock = await _serving()
    h.server.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "m-decode-x9",
                "namespace": NAMESPACE,
                "labels": make_pod("m", "m-decode-foreign", "decode", template="x9")["metadata"]["labels"],
            },
        }
    )
    foreign = controlled(h.server, make_pod("m", "m-decode-foreign", "decode", gated=True, template="x9"))
    admitted = {"type": SERVING_GATE, "status": "True", "message": "restarts=0; copied"}
    foreign["status"]["conditions"] = [
        {"type": "ContainersReady", "status": "True"},
        {"type": "Ready", "status": "True"},
        admitted,
    ]
    h.server.create(foreign)
    frontend.behaviour = lambda p, d: "decode failed: 500" if d == "m-decode-foreign" else True
    for _ in range(4):
        clock.now += 10
        await h.reconcile()
    assert h.server.get("Pod", NAMESPACE, "m-decode-foreign") is not None
    assert gate(h, "m-decode-foreign") == admitted  # its condition as it was written, never patched
    assert all("m-decode-foreign" not in pair for pairs in frontend.probed for pair in pairs)
    assert "RecreatedEngine" not in reasons(h)
    assert h.condition("Serving")["status"] == "True" and h.status["serving"]["pairs"] == 1


async def test_a_replica_that_lost_the_lease_sets_no_gate_and_drains_nothing() -> None:
    # The check writes through the write gate (D123, D143): pod conditions, deletes and the frontend's drains.
    document = FRONTEND.replace("prefill: {replicas: 1}", "prefill: {replicas: 2}").replace(
        "decode: {replicas: 1}", "decode: {replicas: 2}"
    )
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    engines = (
        ("m-prefill-a", "prefill"),
        ("m-prefill-b", "prefill"),
        ("m-decode-a", "decode"),
        ("m-decode-b", "decode"),
    )
    for name, role in engines:
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    leading = [False]
    h.reconciler.kube.may_write = lambda: leading[0]
    assert h.reconciler.serving is not None
    h.reconciler.serving.kube.may_write = h.reconciler.kube.may_write
    writes = h.server.writes
    with pytest.raises(NotLeader):
        await h.reconcile()
    assert all(gate(h, name) == {} for name, _ in engines) and h.server.writes == writes
    # Leading again, the next round admits the engines.
    leading[0] = True
    clock.now += 10
    await h.reconcile()
    assert all(gate(h, name)["status"] == "True" for name, _ in engines)
    kubelet(h.server)
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True"

    # A pair failing between engines that serve elsewhere is drained once a recheck confirms it (as in the drain
    # test). The leader sees the first failure; the replica that runs the recheck has lost the lease: no drain.
    frontend.behaviour = lambda p, d: "timeout" if (p, d) == ("m-prefill-a", "m-decode-a") else True
    clock.now += 10
    await h.reconcile()
    assert frontend.drains == []
    leading[0] = False
    clock.now += 2
    with pytest.raises(NotLeader):
        await h.reconcile()
    assert frontend.drains == []


async def test_with_more_pairs_than_a_round_probes_the_check_still_waits_its_interval() -> None:
    """maxPairs 1 over four pairs: each round probes one. An engine probed in an earlier round is not new, so a
    pass before the interval is up probes nothing (an engine never probed would be probed at once)."""
    document = FRONTEND.replace("prefill: {replicas: 1}", "prefill: {replicas: 2}")
    document = document.replace("decode: {replicas: 1}", "decode: {replicas: 2}")
    document = document.replace("failureThreshold: 2}", "failureThreshold: 2, maxPairs: 1}")
    h, frontend, clock = checked_harness(deployment_document(document))
    await h.reconcile()
    for name, role in (("m-prefill-a", "prefill"), ("m-prefill-b", "prefill")):
        create_pod(h.server, "m", name, role, gated=True)
    for name, role in (("m-decode-a", "decode"), ("m-decode-b", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    for _ in range(8):  # every engine admitted and every pair probed at least once
        await h.reconcile()
        kubelet(h.server)
        clock.now += 10
    probed = {name for round_ in frontend.probed for pair in round_ for name in pair}
    assert probed == {"m-prefill-a", "m-prefill-b", "m-decode-a", "m-decode-b"}
    assert all(len(round_) == 1 for round_ in frontend.probed)
    await h.reconcile()  # a round is due: it probes one pair
    rounds = len(frontend.probed)
    clock.now += 2
    await h.reconcile()
    assert len(frontend.probed) == rounds  # not due, nothing new: no round
    clock.now += 10
    await h.reconcile()
    assert len(frontend.probed) == rounds + 1


async def test_a_recreation_the_api_server_refuses_is_a_warning_and_nothing_is_deleted() -> None:
    h, frontend, clock = await _serving()
    frontend.behaviour = lambda p, d: "decode failed: 500 NIXL_ERR_REMOTE_DISCONNECT"
    h.server.fail(403, 'pods "m-decode-a" is forbidden: cannot delete', method="DELETE", kind="Pod", times=None)
    for step in (10, 2):
        clock.now += step
        await h.reconcile()
    assert {p["metadata"]["name"] for p in h.server.objects("Pod", NAMESPACE)} >= {"m-prefill-a", "m-decode-a"}
    [warning] = [e for e in h.events() if e["reason"] == "RemediationFailed"]
    assert warning["type"] == "Warning"
    assert warning["message"].startswith("deleting pod m-") and "403" in warning["message"]


async def test_without_a_serving_checker_no_engine_pod_waits_for_its_gate() -> None:
    """An operator that runs no checker (the installation's default mode is Enforce) must not render the serving
    readiness gate: nothing would ever set it, and no engine pod would become ready."""
    h = harness(deployment_document(MINIMAL))
    assert h.reconciler.serving is None
    await h.reconcile()
    for name in ("m-prefill", "m-decode"):
        workload = h.server.get("Deployment", NAMESPACE, name)
        assert workload is not None and "readinessGates" not in workload["spec"]["template"]["spec"], name


async def test_a_terminating_frontend_pod_is_not_asked() -> None:
    """A router pod being deleted still runs and has its IP until it stops, but it is on its way out: the check asks
    the other one, and with none left says so."""
    h, frontend, clock = checked_harness(deployment_document(FRONTEND))
    await h.reconcile()
    for name, role in (("m-prefill-a", "prefill"), ("m-decode-a", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    for name, ip in (("m-router-a", "10.9.0.1"), ("m-router-b", "10.9.0.2")):
        pod = make_pod("m", name, "router", ip=ip)
        pod["metadata"]["finalizers"] = ["example.com/hold"]
        h.server.create(controlled(h.server, pod))
    h.server.remove("Pod", NAMESPACE, "m-router-a")
    assert h.server.get("Pod", NAMESPACE, "m-router-a")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    h.settle()
    for _ in range(3):  # the check takes turns among the frontends it may ask
        clock.now += 10
        await h.reconcile()
    assert frontend.asked and set(frontend.asked) == {"10.9.0.2"}
    h.server.remove("Pod", NAMESPACE, "m-router-b")
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"], serving["message"]) == (
        "False",
        "NoFrontend",
        "no frontend pod is running, so nothing can be served",
    )


async def test_a_drain_one_frontend_refuses_is_logged_and_the_others_still_drain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h, frontend, clock = await _serving_two_by_two(refuse_drain={"10.9.0.1"})
    frontend.behaviour = lambda p, d: "timeout" if (p, d) == ("m-prefill-a", "m-decode-a") else True
    with caplog.at_level(logging.WARNING, logger="disagg"):
        for step in (10, 2, 10):
            clock.now += step
            await h.reconcile()
    assert frontend.drains == [("10.9.0.2", "m-prefill-a", "m-decode-a")]
    assert (
        "draining m-prefill-a->m-decode-a at 10.9.0.1: POST http://10.9.0.1:8001/disagg/v1/drain: 503 Service "
        "Unavailable" in caplog.messages
    )
    assert h.condition("Degraded")["reason"] == "PairsDrained"
