"""A child's name taken by an object the DisaggDeployment did not create: nothing is written, status and an event
say which object (D70). Regression tests: before, the pass force-applied over the object, took it over with a
controller reference, and deleting the DisaggDeployment then deleted it."""

from __future__ import annotations

import copy
from typing import Any

from disagg.names import FIRST_WAVE, LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY
from disagg.reconcile.kube import Response
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness

FOREIGN_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "m", "namespace": NAMESPACE, "labels": {"team": "payments"}},
    "spec": {"selector": {"app": "payments"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
}


def _foreign(server: FakeApiServer, obj: dict[str, Any], manager: str = "payments-team") -> dict[str, Any]:
    return server.create(copy.deepcopy(obj), manager=manager)


async def test_a_deployment_named_after_a_foreign_service_leaves_it_alone_and_says_so() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    before = _foreign(server, FOREIGN_SERVICE)
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "retry"
    after = server.get("Service", NAMESPACE, "m")
    assert after == before  # not one field, label, owner reference or manager added
    # Found by the first wave's create-only applies (D191): nothing of the later waves, which run pods, is applied.
    assert {kind for kind, _ in h.children()} <= FIRST_WAVE
    degraded = h.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "NameConflict"
    assert "Service m already exists and is not created by this DisaggDeployment" in degraded["message"]
    assert h.condition("SpecValid")["status"] == "True"
    assert h.condition("Ready")["status"] == "False"
    warnings = [e for e in h.events() if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["NameConflict"]
    assert "Service m already exists" in warnings[0]["message"]


async def test_deleting_the_deployment_does_not_delete_the_foreign_object() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    _foreign(server, FOREIGN_SERVICE)
    h = harness(deployment_document(MINIMAL), server)
    await h.reconcile()
    server.remove("DisaggDeployment", NAMESPACE, "m")  # the garbage collector runs on removal
    assert server.get("Service", NAMESPACE, "m") is not None


async def test_a_child_controlled_by_another_object_is_a_conflict_naming_its_controller() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    other = _foreign(server, {**deployment_document(MINIMAL, name="other")}, manager="kubectl")
    service = copy.deepcopy(FOREIGN_SERVICE)
    service["metadata"]["name"] = "m-router"
    service["metadata"]["labels"] = {LABEL_DEPLOYMENT: "m", LABEL_MANAGED_BY: MANAGED_BY}  # even with our labels
    reference = {"apiVersion": "disagg.dev/v1alpha1", "kind": "DisaggDeployment", "name": "other"}
    service["metadata"]["ownerReferences"] = [{**reference, "uid": other["metadata"]["uid"], "controller": True}]
    before = _foreign(server, service, manager="disagg-operator")
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "retry"
    assert server.get("Service", NAMESPACE, "m-router") == before
    message = h.condition("Degraded")["message"]
    assert "Service m-router already exists and is controlled by DisaggDeployment other" in message


async def test_an_object_with_copied_labels_is_not_adopted() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    service = copy.deepcopy(FOREIGN_SERVICE)
    service["metadata"]["labels"] = {LABEL_DEPLOYMENT: "m", LABEL_MANAGED_BY: MANAGED_BY}
    before = _foreign(server, service, manager="someone")  # listed by our labels, but written by someone else
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "retry"
    assert server.get("Service", NAMESPACE, "m") == before
    assert h.condition("Degraded")["reason"] == "NameConflict"


async def test_once_the_name_is_free_the_next_pass_creates_everything_and_recovers() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    _foreign(server, FOREIGN_SERVICE)
    h = harness(deployment_document(MINIMAL), server)
    await h.reconcile()
    server.remove("Service", NAMESPACE, "m")
    assert await h.reconcile() == "ok"
    assert len(h.children()) == 10
    h.settle()
    await h.reconcile()
    assert h.condition("Degraded")["status"] == "False"
    assert h.status["phase"] == "Ready"


async def test_a_conflict_that_persists_is_not_reported_again() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    _foreign(server, FOREIGN_SERVICE)
    h = harness(deployment_document(MINIMAL), server)
    await h.reconcile()
    await h.reconcile()
    assert len(h.events("NameConflict")) == 1


class _Recording(FakeApiServer):
    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.applied: list[dict[str, Any]] = []

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        if content_type == "application/apply-patch+yaml":
            self.applied.append(copy.deepcopy(body))
        return await super().request(method, path, query, body, content_type)


async def test_updates_carry_the_uid_of_the_object_read_so_a_replacement_is_never_written() -> None:
    server = _Recording()
    h = harness(deployment_document(MINIMAL), server)
    await h.reconcile()
    assert all("uid" not in body["metadata"] for body in server.applied)  # creations
    server.applied.clear()
    h.forget_applied()  # unchanged children are skipped (D121, D192): now every one is applied again
    await h.reconcile()
    uids = {(o["kind"], o["metadata"]["name"]): o["metadata"]["uid"] for o in h.children().values()}
    assert server.applied and all(
        body["metadata"].get("uid") == uids[(body["kind"], body["metadata"]["name"])] for body in server.applied
    )


async def test_a_child_that_cannot_be_read_is_not_written_and_the_status_says_why() -> None:
    # A 403 on reading the router's Deployment: whose object it is stays unknown, so it is left alone.
    h = harness(deployment_document(MINIMAL))
    h.server.fail(
        403, 'deployments "m-router" is forbidden', method="GET", kind="Deployment", name="m-router", times=None
    )
    await h.reconcile()
    assert h.server.get("Deployment", NAMESPACE, "m-router") is None
    assert not [r for r in h.server.requests if r.method != "GET" and r.path.endswith("/deployments/m-router")]
    assert ("Deployment", "m-decode") in h.children()  # the children it could read are applied
    assert h.condition("Degraded")["status"] == "True"
    assert "reading Deployment/m-router" in h.condition("Degraded")["message"]
