"""Status edge cases through whole passes: a pool scaled to zero, the KV store and the render tier in the
picture, the router or the store losing pods, a rollout that is not a loss."""

from __future__ import annotations

from tests.conftest import REPO
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness

LMCACHE = REPO / "examples" / "08-lmcache-shared-server.yaml"


async def ready_harness(document: dict[str, object]) -> Harness:
    h = harness(document)
    await h.reconcile()
    h.settle()
    await h.reconcile()
    assert h.status["phase"] == "Ready", h.status
    return h


async def test_a_pool_scaled_to_zero_is_degraded_and_never_ready() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"]["replicas"] = 0
    h = harness(document)
    assert await h.reconcile() == "ok"  # nothing failed: the spec asks for it
    h.settle()
    await h.reconcile()
    status = h.status
    assert status["phase"] == "Degraded" and status["decodeReady"] == "0/0" and status["prefillReady"] == "2/2"
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "PoolScaledToZero"
    assert degraded["message"] == "decode has 0 replicas, so requests cannot be served"
    assert h.condition("Ready")["status"] == "False" and h.condition("Ready")["reason"] == "PoolScaledToZero"
    assert status["decode"] == {"replicas": 0, "readyReplicas": 0, "updatedReplicas": 0, "desiredReplicas": 0}
    live = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert live is not None and live["spec"]["replicas"] == 0


async def test_scaling_a_ready_pool_to_zero_and_back() -> None:
    h = await ready_harness(deployment_document(MINIMAL))
    h.edit_spec(lambda spec: spec["prefill"].update(replicas=0))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    assert (h.status["phase"], h.condition("Degraded")["reason"]) == ("Degraded", "PoolScaledToZero")
    assert "prefill has 0 replicas" in h.condition("Degraded")["message"]
    h.edit_spec(lambda spec: spec["prefill"].update(replicas=2))
    await h.reconcile()
    assert h.status["phase"] == "Progressing"  # prefill's pods are coming; decode still serves
    h.settle()
    await h.reconcile()
    assert h.status["phase"] == "Ready"
    reasons = [e["reason"] for e in h.events() if e["reason"] not in ("Created",)]
    assert reasons == ["Ready", "NotReady", "PoolScaledToZero", "Recovered", "Ready"]


async def test_the_kv_store_is_reported_and_ready_waits_for_it() -> None:
    h = harness(deployment_document(LMCACHE))
    await h.reconcile()
    h.settle(**{"llama-lmcache-kv-store": 0})
    await h.reconcile()
    status = h.status
    assert status["kvStore"] == {"replicas": 1, "readyReplicas": 0, "ready": False}
    assert status["prefillReady"] == "2/2" and status["decodeReady"] == "2/2"
    assert status["phase"] == "Progressing"
    ready = h.condition("Ready")
    assert ready["status"] == "False" and ready["message"] == "kv-store: 0/1 ready"
    h.settle()
    await h.reconcile()
    assert h.status["kvStore"] == {"replicas": 1, "readyReplicas": 1, "ready": True}
    assert h.status["phase"] == "Ready"
    assert "kv-store: 1/1 ready" in h.condition("Ready")["message"]


async def test_a_kv_store_that_loses_its_pod_is_degraded_until_it_is_back() -> None:
    h = await ready_harness(deployment_document(LMCACHE))
    h.settle(**{"llama-lmcache-kv-store": 0})
    await h.reconcile()
    degraded = h.condition("Degraded")
    assert h.status["phase"] == "Degraded" and degraded["reason"] == "PoolLostPods"
    assert degraded["message"] == "kv-store has 0/1 ready replicas (had 1)"
    assert h.status["kvStore"]["ready"] is False
    await h.reconcile()  # the replacement pod is being created: still a loss, not a rollout
    assert h.condition("Degraded")["message"] == "kv-store has 0/1 ready replicas (still short)"
    h.settle()
    await h.reconcile()
    assert h.status["phase"] == "Ready" and h.condition("Degraded")["status"] == "False"


async def test_a_router_that_loses_its_pod_is_degraded() -> None:
    h = await ready_harness(deployment_document(MINIMAL))
    h.settle(**{"m-router": 0})
    await h.reconcile()
    status = h.status
    assert status["phase"] == "Degraded"
    assert h.condition("Degraded")["message"] == "router has 0/1 ready replicas (had 1)"
    assert status["router"] == {"replicas": 1, "readyReplicas": 0, "ready": False}
    assert (status["prefillReady"], status["decodeReady"]) == ("2/2", "1/1")  # the pools themselves are fine
    warnings = [e["reason"] for e in h.events() if e["type"] == "Warning"]
    assert warnings == ["NotReady", "PoolLostPods"]


async def test_the_render_tier_is_part_of_ready() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["frontend"] = {"render": {"enabled": True, "replicas": 2}}
    h = harness(document)
    await h.reconcile()
    h.settle(**{"m-render": 1})
    await h.reconcile()
    assert h.status["render"] == {"replicas": 2, "readyReplicas": 1, "ready": False}
    assert h.status["phase"] == "Progressing"
    h.settle()
    await h.reconcile()
    assert h.status["render"]["ready"] is True and h.status["phase"] == "Ready"


async def test_a_rollout_is_progressing_not_a_loss() -> None:
    h = await ready_harness(deployment_document(MINIMAL))
    h.edit_spec(lambda spec: spec.update(engine={"maxModelLen": 4096}))
    await h.reconcile()
    # The Deployment controller replaces one prefill pod at a time: one old pod gone, its new one not ready yet.
    h.server.set_status(
        "Deployment",
        NAMESPACE,
        "m-prefill",
        {"replicas": 2, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 2},
    )
    await h.reconcile()
    assert h.status["phase"] == "Progressing"
    assert h.condition("Degraded")["status"] == "False"
    assert "prefill: 1/2 ready, 1 updated" in h.condition("Progressing")["message"]
