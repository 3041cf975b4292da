"""Owner references: every child names its DisaggDeployment as controller, so garbage collection and pruning
find exactly what it created."""

from __future__ import annotations

from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness


async def test_every_child_has_its_deployment_as_only_controller() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    uid = h.owner()["metadata"]["uid"]
    expected = {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "name": "m",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    children = h.children()
    assert (
        len(children) == 10
    )  # router SA, Role, RoleBinding; 2 pool Services, the router's, the endpoint; 3 Deployments
    assert all(child["metadata"]["ownerReferences"] == [expected] for child in children.values())


async def test_children_orphaned_by_a_namesake_are_adopted_by_the_new_deployment() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    old_uid = h.owner()["metadata"]["uid"]
    for kind, name in h.children():  # kubectl delete --cascade=orphan: the GC strips the references
        h.server.update(kind, NAMESPACE, name, lambda o: o["metadata"].pop("ownerReferences"), "garbage-collector")
    h.server.remove("DisaggDeployment", NAMESPACE, "m")
    assert len(h.children()) == 10
    again = harness(deployment_document(MINIMAL), h.server)
    assert await again.reconcile() == "ok"
    new_uid = again.owner()["metadata"]["uid"]
    assert new_uid != old_uid
    for child in again.children().values():
        assert [ref["uid"] for ref in child["metadata"]["ownerReferences"]] == [new_uid]


async def test_owner_references_others_add_are_kept() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    extra = {"apiVersion": "v1", "kind": "ConfigMap", "name": "audit", "uid": "audit-uid"}
    h.server.update(
        "Service", NAMESPACE, "m", lambda s: s["metadata"]["ownerReferences"].append(extra), manager="auditor"
    )
    await h.reconcile()
    references = h.children()[("Service", "m")]["metadata"]["ownerReferences"]
    assert sorted(ref["uid"] for ref in references) == sorted([h.owner()["metadata"]["uid"], "audit-uid"])
