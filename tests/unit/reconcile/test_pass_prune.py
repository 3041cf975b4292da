"""The prune step: children the spec no longer wants go; nothing we do not control is ever deleted."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.names import common_labels
from disagg.reconcile.kube import Response
from disagg.reconcile.reconciler import RetryLater
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness


def with_render_tier(document: dict[str, Any]) -> dict[str, Any]:
    document["spec"]["frontend"] = {"render": {"enabled": True}}
    return document


async def test_children_the_spec_no_longer_wants_are_deleted() -> None:
    h = harness(with_render_tier(deployment_document(MINIMAL)))
    await h.reconcile()
    assert {("Deployment", "m-render"), ("Service", "m-render")} <= set(h.children())
    h.edit_spec(lambda spec: spec["frontend"]["render"].update(enabled=False))
    assert await h.reconcile() == "ok"
    assert not {("Deployment", "m-render"), ("Service", "m-render")} & set(h.children())
    # A routine change, not a problem: a Normal event (kubectl's `--types=Warning` leaves it out).
    pruned = [(e["type"], e["message"]) for e in h.events("Pruned")]
    assert pruned == [("Normal", "deleted Deployment m-render, Service m-render")]


async def test_a_prune_the_api_server_answers_with_a_transient_error_is_retried_with_its_answer() -> None:
    """The retry's reason (which the worker logs) is the API server's answer to the delete."""
    h = harness(with_render_tier(deployment_document(MINIMAL)))
    await h.reconcile()
    h.edit_spec(lambda spec: spec["frontend"]["render"].update(enabled=False))
    h.server.fail(503, "etcdserver: leader changed", method="DELETE", times=1)
    with pytest.raises(RetryLater) as retried:
        await h.reconcile()
    assert str(retried.value) == "503 InternalError: etcdserver: leader changed"
    assert await h.reconcile() == "ok"
    assert not {("Deployment", "m-render"), ("Service", "m-render")} & set(h.children())


async def test_objects_we_do_not_control_are_left_alone() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    labels = common_labels("m", "kv-store")
    lookalike = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m-kv-config", "labels": labels}}
    h.server.create({**lookalike, "metadata": {**lookalike["metadata"], "namespace": NAMESPACE}})
    foreign_owner = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "someone-else", "controller": True}]
    h.server.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "m-old", "namespace": NAMESPACE, "labels": labels, "ownerReferences": foreign_owner},
            "spec": {"selector": {"a": "b"}, "ports": [{"port": 1, "protocol": "TCP"}]},
        }
    )
    assert await h.reconcile() == "ok"
    assert {("ConfigMap", "m-kv-config"), ("Service", "m-old")} <= set(h.children())
    assert h.events("Pruned") == []
    assert not [r for r in h.server.requests if r.method == "DELETE"]


async def test_a_child_already_being_deleted_is_not_deleted_again() -> None:
    h = harness(with_render_tier(deployment_document(MINIMAL)))
    await h.reconcile()
    h.server.update(
        "Service", NAMESPACE, "m-render", lambda s: s["metadata"].update(finalizers=["example.com/hold"]), "user"
    )
    h.edit_spec(lambda spec: spec["frontend"]["render"].update(enabled=False))
    await h.reconcile()
    held = h.server.get("Service", NAMESPACE, "m-render")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    deletes = len([r for r in h.server.requests if r.method == "DELETE"])
    await h.reconcile()
    assert len([r for r in h.server.requests if r.method == "DELETE"]) == deletes


class ReplacesBeforeDelete(FakeApiServer):
    """Someone deletes and re-creates a child between the reconciler's list and its delete."""

    def __init__(self, victim: tuple[str, str]) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.victim = victim

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        kind, name = self.victim
        if method == "DELETE" and path.endswith(f"/{name}") and self.get(kind, NAMESPACE, name):
            old = self.get(kind, NAMESPACE, name)
            assert old is not None
            self.remove(kind, NAMESPACE, name)
            for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp", "ownerReferences"):
                old["metadata"].pop(key, None)
            self.create(old, manager="someone")
        return await super().request(method, path, query, body, content_type)


async def test_a_same_named_object_created_after_our_read_is_not_deleted() -> None:
    server = ReplacesBeforeDelete(("Deployment", "m-render"))
    h = harness(with_render_tier(deployment_document(MINIMAL)), server)
    await h.reconcile()
    h.edit_spec(lambda spec: spec["frontend"]["render"].update(enabled=False))
    await h.reconcile()
    survivor = h.server.get("Deployment", NAMESPACE, "m-render")
    assert survivor is not None and "ownerReferences" not in survivor["metadata"]
    assert h.server.get("Service", NAMESPACE, "m-render") is None  # the untouched one was pruned
