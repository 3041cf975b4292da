"""A replica without a memory of what was applied (after a takeover or a restart) takes the one the status carries
when the children prove it (D192): its first pass applies nothing that would change nothing, and everything else
as before."""

from __future__ import annotations

from typing import Any

from disagg.reconcile import metrics
from disagg.reconcile.children import FIELD_MANAGER
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness, reconciler_for


def applies(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH" and r.query.get("fieldManager") == FIELD_MANAGER]


def restored() -> float:
    return metrics.REGISTRY.get_sample_value("disagg_applied_restored_total") or 0.0


async def settled_then_taken_over() -> tuple[Harness, Harness]:
    """A DisaggDeployment reconciled and settled by one replica, and a second replica (a new process) over the same
    cluster."""
    first = harness(deployment_document(MINIMAL))
    await first.reconcile()
    first.settle()  # the controllers report after the applies: workload versions move on
    await first.reconcile()
    await first.reconcile()
    return first, Harness(first.server, reconciler_for(first.server, instance="op-b"), first.name)


async def test_the_status_carries_a_digest_of_what_was_applied() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    digest = h.status["appliedDigest"]
    assert digest == h.reconciler.applied.fingerprint(h.key)
    h.server.update("Service", NAMESPACE, "m-router", lambda s: s["spec"].update(selector={"x": "y"}), manager="e")
    await h.reconcile()  # repaired: applied again, at a new version
    assert h.status["appliedDigest"] != digest


async def test_a_new_replica_applies_nothing_when_the_children_are_as_the_status_says() -> None:
    first, second = await settled_then_taken_over()
    before, count = len(applies(first.server)), restored()
    assert await second.reconcile() == "ok"
    assert len(applies(first.server)) == before
    assert restored() == count + 1
    assert second.status["appliedDigest"] == first.status["appliedDigest"]


async def test_a_child_changed_since_the_digest_is_applied_again_by_the_new_replica() -> None:
    first, second = await settled_then_taken_over()
    first.server.update("Service", NAMESPACE, "m", lambda s: s["spec"].update(selector={"x": "y"}), manager="kubectl")
    before = len(applies(first.server))
    assert await second.reconcile() == "ok"
    assert len(applies(first.server)) - before == len(first.children())  # all of them: the proof failed
    assert first.server.get("Service", NAMESPACE, "m")["spec"]["selector"] != {"x": "y"}  # type: ignore[index]


async def test_a_spec_changed_since_the_digest_is_applied_by_the_new_replica() -> None:
    first, second = await settled_then_taken_over()
    first.edit_spec(lambda spec: spec["prefill"].update(replicas=4))
    assert await second.reconcile() == "ok"
    assert first.server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 4  # type: ignore[index]


async def test_a_deleted_child_is_created_by_the_new_replica() -> None:
    first, second = await settled_then_taken_over()
    first.server.remove("Deployment", NAMESPACE, "m-router")
    assert await second.reconcile() == "ok"
    assert ("Deployment", "m-router") in first.children()


async def test_a_replica_with_a_memory_of_its_own_keeps_it() -> None:
    first, _ = await settled_then_taken_over()
    # A digest in status that proves nothing (another operator's, or a garbled one) changes nothing for this one.
    first.server.set_status("DisaggDeployment", NAMESPACE, "m", {**first.status, "appliedDigest": "garbled"})
    before = len(applies(first.server))
    await first.reconcile()
    assert len(applies(first.server)) == before
    assert first.status["appliedDigest"] == first.reconciler.applied.fingerprint(first.key)
