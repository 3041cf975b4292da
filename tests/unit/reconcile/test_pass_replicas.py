"""Replicas of autoscaled pools: created with the spec's count, then owned by the autoscaler (decision D20)."""

from __future__ import annotations

from disagg.reconcile.children import FIELD_MANAGER, REPLICAS_MANAGER
from disagg.reconcile.ownership import manages_replicas
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness

EXTERNAL = {"enabled": True, "controller": "external"}


def decode(h_children: dict[tuple[str, str], dict[str, object]]) -> dict[str, object]:
    return h_children[("Deployment", "m-decode")]


async def test_an_autoscaled_pool_starts_from_the_spec_and_then_belongs_to_its_autoscaler() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"] = {"replicas": 2, "autoscaling": EXTERNAL}
    h = harness(document)
    await h.reconcile()
    created = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert created is not None and created["spec"]["replicas"] == 2
    assert manages_replicas(created, REPLICAS_MANAGER)
    await h.reconcile()
    handed = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert handed is not None
    assert manages_replicas(handed, REPLICAS_MANAGER) and not manages_replicas(handed, FIELD_MANAGER)

    h.server.update("Deployment", NAMESPACE, "m-decode", lambda d: d["spec"].update(replicas=5), manager="hpa")
    h.settle()
    await h.reconcile()
    scaled = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert scaled is not None and scaled["spec"]["replicas"] == 5
    assert h.status["decode"]["desiredReplicas"] == 5 and h.status["decodeReady"] == "5/5"
    assert h.status["phase"] == "Ready"
    prefill = h.server.get("Deployment", NAMESPACE, "m-prefill")
    assert prefill is not None and manages_replicas(prefill, FIELD_MANAGER)  # not autoscaled: the spec's


async def test_turning_autoscaling_on_keeps_the_live_count() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.server.update("Deployment", NAMESPACE, "m-decode", lambda d: d["spec"].update(replicas=3), manager="kubectl")
    h.edit_spec(lambda spec: spec["decode"].update(autoscaling=EXTERNAL))
    await h.reconcile()
    live = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert live is not None and live["spec"]["replicas"] == 3
    await h.reconcile()
    live = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert live is not None and live["spec"]["replicas"] == 3 and not manages_replicas(live, FIELD_MANAGER)


async def test_turning_autoscaling_off_gives_the_count_back_to_the_spec() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"] = {"replicas": 2, "autoscaling": EXTERNAL}
    h = harness(document)
    await h.reconcile()
    await h.reconcile()
    h.server.update("Deployment", NAMESPACE, "m-decode", lambda d: d["spec"].update(replicas=6), manager="hpa")
    h.edit_spec(lambda spec: spec["decode"].pop("autoscaling"))
    await h.reconcile()
    live = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert live is not None and live["spec"]["replicas"] == 2 and manages_replicas(live, FIELD_MANAGER)
