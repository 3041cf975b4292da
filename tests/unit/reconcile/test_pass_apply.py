"""The apply step against the fake API server: what a pass creates, repairs, and reports when it cannot."""

from __future__ import annotations

import pytest

from disagg.api.validate import validate_deployment
from disagg.plan import build_plan
from disagg.reconcile.reconciler import RetryLater
from disagg.render import render_plan
from tests.conftest import REPO
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness, is_within


def created(h: Harness) -> list[str]:
    """What the Created events name, one "Kind name" per object."""
    return [item for e in h.events("Created") for item in e["message"].removeprefix("created ").split(", ")]


async def test_the_first_pass_creates_exactly_the_rendered_objects() -> None:
    h = harness(deployment_document(MINIMAL))
    assert await h.reconcile() == "ok"
    validated = validate_deployment(h.owner()).deployment
    assert validated is not None
    # What the pure core renders for this operator (without a serving checker nothing is gated).
    objects = render_plan(build_plan(validated, NAMESPACE, h.reconciler.installation))
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    children = h.children()
    assert set(children) == set(rendered)
    for key, obj in rendered.items():
        assert is_within(obj, children[key]), key
    assert sorted(created(h)) == sorted(f"{kind} {name}" for kind, name in rendered)
    assert len(h.events("Created")) == 1  # one event per pass, however many children it created


async def test_a_settled_deployment_costs_no_writes() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()  # status moves to Ready
    writes, events = h.server.writes, len(h.events())
    assert await h.reconcile() == "ok"
    assert h.server.writes == writes  # no apply changed anything, and status was not patched again
    assert len(h.events()) == events


async def test_hand_edits_and_deleted_children_are_restored() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    original = h.children()[("Service", "m")]

    def edit(service: dict[str, object]) -> None:
        spec = service["spec"]
        assert isinstance(spec, dict)
        spec["selector"] = {**spec["selector"], "disagg.dev/role": "decode"}
        spec["ports"][0]["targetPort"] = 9999

    h.server.update("Service", NAMESPACE, "m", edit, manager="kubectl-edit")
    h.server.update("Deployment", NAMESPACE, "m-prefill", lambda d: d["spec"].update(replicas=5), manager="kubectl")
    h.server.remove("Deployment", NAMESPACE, "m-router")
    assert await h.reconcile() == "ok"
    children = h.children()
    assert children[("Service", "m")]["spec"]["selector"] == original["spec"]["selector"]
    assert children[("Service", "m")]["spec"]["ports"] == original["spec"]["ports"]
    assert children[("Deployment", "m-prefill")]["spec"]["replicas"] == 2
    assert ("Deployment", "m-router") in children
    assert created(h).count("Deployment m-router") == 2


async def test_an_object_the_server_refuses_is_reported_and_the_rest_still_applied() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(
        422, 'Service "m-router" is invalid: spec.ports', method="PATCH", kind="Service", name="m-router", times=None
    )
    assert await h.reconcile() == "retry"
    degraded = h.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ApplyFailed"
    assert "Service/m-router: 422" in degraded["message"]
    assert ("Deployment", "m-router") in h.children() and ("Service", "m-router") not in h.children()
    assert h.status["phase"] == "Degraded"
    assert [e["reason"] for e in h.events() if e["type"] == "Warning"] == ["ApplyFailed"]


async def test_a_transient_error_retries_the_pass_before_saying_anything() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(500, "etcdserver: request timed out", method="PATCH", kind="Deployment", times=1)
    with pytest.raises(RetryLater):
        await h.reconcile()
    assert "status" not in h.owner()
    assert await h.reconcile() == "ok"


async def test_without_the_leaderworkerset_api_the_other_objects_are_applied_and_status_says_why() -> None:
    document = deployment_document(REPO / "examples" / "10-qwen35-dep-multinode-decode.yaml")
    h = harness(document)
    h.server.unserve("LeaderWorkerSet")
    assert await h.reconcile() == "retry"
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "ApiMissing" and "install LeaderWorkerSet" in degraded["message"]
    assert ("Deployment", "qwen35-dep-prefill") in h.children()


async def test_a_namespace_being_deleted_ends_the_pass_quietly() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.terminate_namespace(NAMESPACE)
    assert await h.reconcile() == "gone"
    assert "status" not in h.owner() and h.children() == {}


async def test_a_deleted_deployment_is_forgotten() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.reconciler.queue.add(h.key)
    h.server.remove("DisaggDeployment", NAMESPACE, "m")
    assert await h.reconcile() == "gone"
    assert h.key not in h.reconciler.known
    assert h.children() == {}  # the garbage collector took the children with their owner
