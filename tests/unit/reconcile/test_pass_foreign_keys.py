"""Labels and annotations the operator does not send are not drift (D251): the Deployment controller annotates every
Deployment it rolls out with `deployment.kubernetes.io/revision` right after its creation, and each new
DisaggDeployment used to pay for that with a second apply of every Deployment and another status write (17 requests
per new DisaggDeployment in the fleet benchmark). What the operator sends is still repaired."""

from __future__ import annotations

from typing import Any

from disagg.reconcile.children import FIELD_MANAGER
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, REVISION_ANNOTATION, Harness, deployment_document, harness


def applies(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH" and r.query.get("fieldManager") == FIELD_MANAGER]


def status_writes(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH" and r.path.endswith("/status")]


def deployments(h: Harness) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in h.server.objects("Deployment", NAMESPACE))


def annotate(h: Harness, name: str, annotations: dict[str, str], manager: str) -> None:
    h.server.update(
        "Deployment",
        NAMESPACE,
        name,
        lambda d: d["metadata"].setdefault("annotations", {}).update(annotations),
        manager=manager,
    )


async def test_the_deployment_controller_s_revision_annotation_costs_no_apply_and_no_status_write() -> None:
    h = harness(deployment_document(MINIMAL))
    assert await h.reconcile() == "ok"
    digest = h.status["appliedDigest"]
    applied, written = len(applies(h.server)), len(status_writes(h.server))
    for name in deployments(h):  # before any status report, as kube-controller-manager does it
        annotate(h, name, {REVISION_ANNOTATION: "1"}, manager="kube-controller-manager")
    assert await h.reconcile() == "ok"
    assert len(applies(h.server)) == applied
    assert len(status_writes(h.server)) == written
    assert h.status["appliedDigest"] == digest


async def test_someone_else_s_label_on_a_deployment_stays_and_is_not_applied_over() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    applied = len(applies(h.server))
    h.server.update(
        "Deployment", NAMESPACE, "m-decode", lambda d: d["metadata"]["labels"].update(team="ml"), manager="kubectl"
    )
    assert await h.reconcile() == "ok"
    assert len(applies(h.server)) == applied
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert decode is not None and decode["metadata"]["labels"]["team"] == "ml"


async def test_a_label_the_operator_sends_changed_on_a_deployment_is_put_back() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert decode is not None
    ours = dict(decode["metadata"]["labels"])
    component = "app.kubernetes.io/component"
    h.server.update(
        "Deployment", NAMESPACE, "m-decode", lambda d: d["metadata"]["labels"].update({component: "x"}), manager="k"
    )
    applied = len(applies(h.server))
    assert await h.reconcile() == "ok"
    assert len(applies(h.server)) == applied + 1
    decode = h.server.get("Deployment", NAMESPACE, "m-decode")
    assert decode is not None and decode["metadata"]["labels"] == ours
