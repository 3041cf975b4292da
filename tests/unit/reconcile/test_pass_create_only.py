"""The first wave's children that the watch cache does not hold are created only if nothing is at their name, without
a read (D191): a new DisaggDeployment costs one request per such child, and an object that is there after all,
whoever made it and whenever, is never written by that create."""

from __future__ import annotations

import copy
from typing import Any

from disagg.names import FIRST_WAVE, LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY
from disagg.reconcile.children import FIELD_MANAGER
from disagg.reconcile.kube import Response
from disagg.reconcile.ownership import CREATE_ONLY_VERSION
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness

APPLY = "application/apply-patch+yaml"


class Racing(FakeApiServer):
    """Records every apply body; `before_create` puts an object at a name just before the operator's create-only
    apply of it arrives (as another client would, after the operator's cache last saw the name free)."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.applied: list[dict[str, Any]] = []
        self.before_create: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        if content_type == APPLY:
            self.applied.append(copy.deepcopy(body))
            planted = self.before_create.pop((body["kind"], body["metadata"]["name"]), None)
            if planted is not None and body["metadata"].get("resourceVersion") == CREATE_ONLY_VERSION:
                obj, manager = planted
                answer = await super().request(
                    "PATCH", path, [("fieldManager", manager), ("force", "true")], obj, APPLY
                )
                assert answer.status == 200, answer
        return await super().request(method, path, query, body, content_type)


def foreign_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "m", "namespace": NAMESPACE, "labels": {"team": "payments"}},
        "spec": {"selector": {"app": "payments"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }


async def test_a_new_deployment_creates_its_first_wave_without_reading_it() -> None:
    server = Racing()
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "ok"
    children = h.children()
    first = {key for key in children if key[0] in FIRST_WAVE}
    assert first and len(first) < len(children)
    gets = [r for r in server.requests if r.method == "GET" and "labelSelector" not in r.query]  # not the informers'
    assert not [r for r in gets if r.path.split("/")[-2] in ("services", "serviceaccounts", "roles", "configmaps")]
    creates = [body for body in server.applied if body["metadata"].get("resourceVersion") == CREATE_ONLY_VERSION]
    assert sorted((b["kind"], b["metadata"]["name"]) for b in creates) == sorted(first)
    for key in first:  # created as any apply creates: owned by our manager's Apply, at an ordinary version
        obj = children[key]
        assert obj["metadata"]["resourceVersion"] != CREATE_ONLY_VERSION
        assert any(
            e["manager"] == FIELD_MANAGER and e["operation"] == "Apply" for e in obj["metadata"]["managedFields"]
        )
    # The second wave is read as before (D150): a workload is never created before every name is known to be free.
    second = [key for key in children if key[0] not in FIRST_WAVE]
    assert len(gets) == len(second)
    server.applied.clear()
    h.forget_applied()  # unchanged children are skipped (D121, D192): now every one is applied again
    assert await h.reconcile() == "ok"
    assert server.applied and all("resourceVersion" not in b["metadata"] for b in server.applied)
    assert all(
        b["metadata"]["uid"] == children[(b["kind"], b["metadata"]["name"])]["metadata"]["uid"] for b in server.applied
    )


async def test_an_object_put_at_a_first_wave_name_after_the_cache_saw_it_free_is_never_written() -> None:
    server = Racing()
    server.before_create[("Service", "m")] = (foreign_service(), "payments-team")
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "retry"
    service = server.get("Service", NAMESPACE, "m")
    assert service is not None
    assert service["metadata"]["labels"] == {"team": "payments"} and "ownerReferences" not in service["metadata"]
    assert [e["manager"] for e in service["metadata"]["managedFields"]] == ["payments-team"]
    assert h.condition("Degraded")["reason"] == "NameConflict"
    assert "Service m already exists and is not created by this DisaggDeployment" in h.condition("Degraded")["message"]
    assert {kind for kind, _ in h.children()} <= FIRST_WAVE  # no workload while a name is taken
    assert [e["reason"] for e in h.events() if e["type"] == "Warning"] == ["NameConflict"]
    assert await h.reconcile() == "retry"  # and again: the conflict stays, reported once
    assert len(h.events("NameConflict")) == 1
    server.remove("Service", NAMESPACE, "m")
    assert await h.reconcile() == "ok"  # the name is free: created, then the rest
    assert len(h.children()) == 10


async def test_our_own_object_the_cache_did_not_show_is_claimed_and_applied_in_the_same_pass() -> None:
    # Our orphan (our labels, written by our manager, no controller), e.g. left by `--cascade=orphan` and not yet in
    # the cache: the create-only apply finds it, the pass reads it, adopts it and applies it with its uid.
    server = Racing()
    orphan = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "m-router",
            "namespace": NAMESPACE,
            "labels": {LABEL_DEPLOYMENT: "m", LABEL_MANAGED_BY: MANAGED_BY, "left": "behind"},
        },
    }
    server.before_create[("ServiceAccount", "m-router")] = (orphan, FIELD_MANAGER)
    h = harness(deployment_document(MINIMAL), server)
    assert await h.reconcile() == "ok"
    adopted = server.get("ServiceAccount", NAMESPACE, "m-router")
    assert adopted is not None
    owner_uid = h.owner()["metadata"]["uid"]
    assert [ref["uid"] for ref in adopted["metadata"]["ownerReferences"]] == [owner_uid]
    assert "left" not in adopted["metadata"]["labels"]  # our manager stopped sending it: removed
    updates = [b for b in server.applied if (b["kind"], b["metadata"]["name"]) == ("ServiceAccount", "m-router")]
    assert [b["metadata"].get("resourceVersion") for b in updates] == [CREATE_ONLY_VERSION, None]
    assert updates[-1]["metadata"]["uid"] == adopted["metadata"]["uid"]
    assert len(h.children()) == 10
