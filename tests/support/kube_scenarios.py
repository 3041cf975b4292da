"""API-server behaviour the reconciler relies on, as scenarios that run against any `Kube`.

tests/unit/reconcile/test_fake_kube.py runs them against the fake API server (tests/support/fake_kube.py);
e2e/test_fake_kube_contract.py runs the same ones against a real kube-apiserver, so the fake cannot drift from
the real semantics unnoticed.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from disagg.names import API_VERSION, KIND
from disagg.reconcile.children import FIELD_MANAGER, REPLICAS_MANAGER
from disagg.reconcile.kube import Kube, KubeError, Transport, path
from disagg.reconcile.ownership import CREATE_ONLY_VERSION, manages_replicas, replicas_patch


@dataclass
class Cluster:
    """What a scenario talks to: the operator's client, the raw transport under it, and a namespace of its own."""

    kube: Kube
    transport: Transport
    namespace: str
    settle_seconds: float = 0.0
    """How long asynchronous server work (garbage collection) may take: 0 for the fake."""

    async def send(
        self,
        method: str,
        location: str,
        body: Any = None,
        query: tuple[tuple[str, str], ...] = (),
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        response = await self.transport.request(method, location, list(query), body, content_type)
        return response.status, json.loads(response.body) if response.body else None

    async def eventually(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + self.settle_seconds
        while not await probe():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen within {self.settle_seconds:.0f}s")
            await asyncio.sleep(0.2)


def config_map(namespace: str, name: str, data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **metadata},
    }
    if data is not None:
        obj["data"] = data
    return obj


def deployment(
    namespace: str, name: str, replicas: int | None, image: str = "registry.invalid/app:1"
) -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": image}]},
        },
    }
    if replicas is not None:
        spec = {"replicas": replicas, **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def owns(obj: dict[str, Any], manager: str, *fields: str) -> bool:
    """Whether `manager` holds the field (given as plain names, e.g. "metadata", "labels", "team") by Apply or
    Update."""
    for entry in obj["metadata"].get("managedFields") or []:
        if entry.get("manager") != manager:
            continue
        node = entry.get("fieldsV1") or {}
        for name in fields:
            node = node.get(f"f:{name}")
            if node is None:
                break
        else:
            return True
    return False


async def apply_that_changes_nothing_writes_nothing(c: Cluster) -> None:
    first = await c.kube.apply(config_map(c.namespace, "idem", {"a": "1"}))
    again = await c.kube.apply(config_map(c.namespace, "idem", {"a": "1"}))
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    changed = await c.kube.apply(config_map(c.namespace, "idem", {"a": "2"}))
    assert changed["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert changed["data"] == {"a": "2"}
    assert changed["metadata"]["uid"] == first["metadata"]["uid"]


async def a_field_a_manager_stops_sending_goes_unless_another_owns_it(c: Cluster) -> None:
    await c.kube.apply(config_map(c.namespace, "share", {"a": "1", "b": "2"}), manager="first")
    await c.kube.apply(config_map(c.namespace, "share", {"b": "2"}), manager="second")  # co-owns b, same value
    after = await c.kube.apply(config_map(c.namespace, "share"), manager="first")
    assert after["data"] == {"b": "2"}
    assert owns(after, "second", "data", "b") and not owns(after, "first", "data", "b")


async def a_conflicting_apply_fails_unless_forced_and_force_takes_the_field(c: Cluster) -> None:
    await c.kube.apply(config_map(c.namespace, "fight", {"k": "1"}), manager="first")
    status, body = await c.send(
        "PATCH",
        path("ConfigMap", c.namespace, "fight"),
        config_map(c.namespace, "fight", {"k": "2"}),
        query=(("fieldManager", "second"),),
        content_type="application/apply-patch+yaml",
    )
    assert status == 409 and body["reason"] == "Conflict", (status, body)
    taken = await c.kube.apply(config_map(c.namespace, "fight", {"k": "2"}), manager="second")
    assert taken["data"] == {"k": "2"} and not owns(taken, "first", "data", "k")
    # The first manager lost the field, so no longer sending it leaves it alone.
    after = await c.kube.apply(config_map(c.namespace, "fight"), manager="first")
    assert after["data"] == {"k": "2"}


async def an_update_by_another_client_takes_the_fields_it_changes(c: Cluster) -> None:
    ours = config_map(c.namespace, "edited", {"k": "1"}, labels={"team": "a"})
    applied = await c.kube.apply(ours)
    edited = copy.deepcopy(applied)
    edited["metadata"]["labels"]["team"] = "b"
    status, body = await c.send(
        "PUT", path("ConfigMap", c.namespace, "edited"), edited, query=(("fieldManager", "kubectl-edit"),)
    )
    assert status == 200, body
    assert owns(body, "kubectl-edit", "metadata", "labels", "team")
    assert not owns(body, FIELD_MANAGER, "metadata", "labels", "team")
    assert owns(body, FIELD_MANAGER, "data", "k")
    restored = await c.kube.apply(ours)  # forced, as the reconciler applies: drift is taken back
    assert restored["metadata"]["labels"] == {"team": "a"}
    assert owns(restored, FIELD_MANAGER, "metadata", "labels", "team")


async def an_item_another_client_adds_to_a_keyed_list_survives_a_forced_apply(c: Cluster) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "keyed", "namespace": c.namespace},
        "spec": {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}]},
    }
    applied = await c.kube.apply(service)
    edited = copy.deepcopy(applied)
    edited["spec"]["ports"].append({"name": "extra", "port": 9000, "protocol": "TCP", "targetPort": 9000})
    status, body = await c.send(
        "PUT", path("Service", c.namespace, "keyed"), edited, query=(("fieldManager", "kubectl-edit"),)
    )
    assert status == 200, body
    # Ports are keyed by (port, protocol): our apply owns only the item it sends, so the other one stays.
    again = await c.kube.apply(service)
    assert sorted(port["port"] for port in again["spec"]["ports"]) == [8000, 9000]


async def replicas_stay_when_a_second_manager_co_owns_them(c: Cluster) -> None:
    workload = deployment(c.namespace, "handed", replicas=2)
    await c.kube.apply(workload)
    await c.kube.apply(replicas_patch(workload, 2), manager=REPLICAS_MANAGER)
    without = copy.deepcopy(workload)
    del without["spec"]["replicas"]
    kept = await c.kube.apply(without)
    assert kept["spec"]["replicas"] == 2
    assert manages_replicas(kept, REPLICAS_MANAGER) and not manages_replicas(kept, FIELD_MANAGER)
    scaled = await c.kube.apply(replicas_patch(workload, 3), manager=REPLICAS_MANAGER)
    assert scaled["spec"]["replicas"] == 3
    assert (await c.kube.apply(without))["spec"]["replicas"] == 3


async def replicas_nobody_sends_fall_back_to_the_default(c: Cluster) -> None:
    workload = deployment(c.namespace, "alone", replicas=2)
    await c.kube.apply(workload)
    without = copy.deepcopy(workload)
    del without["spec"]["replicas"]
    assert (await c.kube.apply(without))["spec"]["replicas"] == 1


async def generation_counts_changes_to_the_spec_only(c: Cluster) -> None:
    workload = deployment(c.namespace, "generations", replicas=0)
    assert (await c.kube.apply(workload))["metadata"]["generation"] == 1
    workload["metadata"]["labels"] = {"extra": "label"}
    assert (await c.kube.apply(workload))["metadata"]["generation"] == 1
    workload["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/app:2"
    assert (await c.kube.apply(workload))["metadata"]["generation"] == 2


async def a_deployment_selector_must_match_its_template_and_never_changes(c: Cluster) -> None:
    workload = deployment(c.namespace, "selected", replicas=0)
    wrong = copy.deepcopy(workload)
    wrong["spec"]["selector"]["matchLabels"] = {"app": "other"}
    status, body = await c.send(
        "PATCH",
        path("Deployment", c.namespace, "selected"),
        wrong,
        query=(("fieldManager", FIELD_MANAGER), ("force", "true")),
        content_type="application/apply-patch+yaml",
    )
    assert status == 422 and body["reason"] == "Invalid", (status, body)
    await c.kube.apply(workload)
    moved = copy.deepcopy(workload)
    moved["spec"]["selector"]["matchLabels"]["tier"] = "x"
    moved["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    status, body = await c.send(
        "PATCH",
        path("Deployment", c.namespace, "selected"),
        moved,
        query=(("fieldManager", FIELD_MANAGER), ("force", "true")),
        content_type="application/apply-patch+yaml",
    )
    assert status == 422 and "immutable" in body["message"], (status, body)


async def owner_references_merge_by_uid_and_only_one_may_be_the_controller(c: Cluster) -> None:
    owners = [await c.kube.apply(config_map(c.namespace, f"owner-{i}")) for i in (1, 2)]
    refs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
        for o in owners
    ]
    await c.kube.apply(config_map(c.namespace, "owned", ownerReferences=[refs[0]]), manager="first")
    merged = await c.kube.apply(config_map(c.namespace, "owned", ownerReferences=[refs[1]]), manager="second")
    assert sorted(r["uid"] for r in merged["metadata"]["ownerReferences"]) == sorted(r["uid"] for r in refs)
    two_controllers = [{**ref, "controller": True} for ref in refs]
    status, body = await c.send(
        "PATCH",
        path("ConfigMap", c.namespace, "controlled"),
        config_map(c.namespace, "controlled", ownerReferences=two_controllers),
        query=(("fieldManager", FIELD_MANAGER), ("force", "true")),
        content_type="application/apply-patch+yaml",
    )
    assert status == 422 and body["reason"] == "Invalid", (status, body)


async def delete_honours_the_uid_precondition(c: Cluster) -> None:
    created = await c.kube.apply(config_map(c.namespace, "doomed", {"k": "v"}))
    uid = created["metadata"]["uid"]
    status, body = await c.send(
        "DELETE",
        path("ConfigMap", c.namespace, "doomed"),
        {"propagationPolicy": "Background", "preconditions": {"uid": "not-" + uid}},
    )
    assert status == 409 and body["reason"] == "Conflict", (status, body)
    await c.kube.delete("ConfigMap", c.namespace, "doomed", "not-" + uid)  # Kube treats this as "not ours"
    assert await c.kube.get("ConfigMap", c.namespace, "doomed") is not None
    await c.kube.delete("ConfigMap", c.namespace, "doomed", uid)
    assert await c.kube.get("ConfigMap", c.namespace, "doomed") is None
    await c.kube.delete("ConfigMap", c.namespace, "doomed", uid)  # already gone: nothing to do


async def dependents_go_with_their_owner(c: Cluster) -> None:
    owner = await c.kube.apply(config_map(c.namespace, "parent"))
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": owner["metadata"]["uid"]}
    await c.kube.apply(config_map(c.namespace, "child", ownerReferences=[{**reference, "controller": True}]))
    await c.kube.delete("ConfigMap", c.namespace, "parent", owner["metadata"]["uid"])

    async def child_gone() -> bool:
        return await c.kube.get("ConfigMap", c.namespace, "child") is None

    await c.eventually(child_gone, "garbage collection of the child")


async def lists_filter_by_labels(c: Cluster) -> None:
    for name, labels in (("l-1", {"x": "1", "y": "1"}), ("l-2", {"x": "1", "y": "2"}), ("l-3", {"x": "2"})):
        await c.kube.apply(config_map(c.namespace, name, labels=labels))
    names = lambda items: sorted(i["metadata"]["name"] for i in items)  # noqa: E731
    assert names(await c.kube.list("ConfigMap", c.namespace, "x=1")) == ["l-1", "l-2"]
    assert names(await c.kube.list("ConfigMap", c.namespace, "x=1,y!=2")) == ["l-1"]
    assert names(await c.kube.list("ConfigMap", c.namespace, "y")) == ["l-1", "l-2"]
    assert names(await c.kube.list("ConfigMap", c.namespace, "x,!y")) == ["l-3"]
    items = await c.kube.list("ConfigMap", c.namespace, "x=2")
    assert items[0]["kind"] == "ConfigMap" and items[0]["apiVersion"] == "v1"


async def kinds_the_server_does_not_serve_are_missing_apis(c: Cluster) -> None:
    for location in (
        f"/apis/nothing.disagg.dev/v1/namespaces/{c.namespace}/nothings",  # no such group: a text 404
        f"/apis/apps/v1/namespaces/{c.namespace}/nothings",  # a served group, no such resource: a Status
        f"/apis/apps/v9/namespaces/{c.namespace}/deployments",  # a served group, no such version: a Status
    ):
        for method, body in (("GET", None), ("PATCH", config_map(c.namespace, "x"))):
            response = await c.transport.request(
                method, location, [("fieldManager", FIELD_MANAGER)], body, "application/apply-patch+yaml"
            )
            error = KubeError.from_response(response)
            assert error.status == 404 and error.api_missing, (method, location, error)
    missing_object = KubeError.from_response(
        await c.transport.request("GET", path("ConfigMap", c.namespace, "absent"), [], None, "application/json")
    )
    assert missing_object.status == 404 and not missing_object.api_missing


async def status_merge_patches_remove_what_is_null(c: Cluster) -> None:
    resource = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "merged", "namespace": c.namespace},
        "spec": {"model": {"name": "m"}},
    }
    status, body = await c.send("POST", path(KIND, c.namespace), resource, query=(("fieldManager", "test"),))
    assert status in (200, 201), body
    await c.kube.patch_status(c.namespace, "merged", {"phase": "Ready", "endpoint": "http://merged"})
    await c.kube.patch_status(c.namespace, "merged", {"endpoint": None})
    read = await c.kube.get(KIND, c.namespace, "merged")
    assert read is not None and read["status"] == {"phase": "Ready"}
    assert read["metadata"]["generation"] == 1  # status writes are not spec changes


async def missing_objects_read_as_none(c: Cluster) -> None:
    assert await c.kube.get("Service", c.namespace, "never-created") is None
    status, body = await c.send("GET", path("Service", c.namespace, "never-created"))
    assert status == 404 and body["reason"] == "NotFound"


async def an_apply_carrying_a_uid_writes_only_the_object_with_that_uid(c: Cluster) -> None:
    """The operator's precondition (D70): a uid in the body makes an apply refuse a missing or replaced object."""
    ghost = config_map(c.namespace, "ghost", {"k": "1"}, uid="00000000-0000-0000-0000-000000000001")
    with pytest.raises(KubeError) as missing:
        await c.kube.apply(ghost)
    assert missing.value.status == 409 and missing.value.replaced
    assert await c.kube.get("ConfigMap", c.namespace, "ghost") is None
    first = await c.kube.apply(config_map(c.namespace, "held", {"k": "1"}))
    uid = first["metadata"]["uid"]
    updated = await c.kube.apply(config_map(c.namespace, "held", {"k": "2"}, uid=uid))
    assert updated["data"] == {"k": "2"} and updated["metadata"]["uid"] == uid
    assert not any("f:uid" in json.dumps(entry) for entry in updated["metadata"]["managedFields"])
    await c.kube.delete("ConfigMap", c.namespace, "held")
    await c.kube.apply(config_map(c.namespace, "held", {"k": "someone else's"}), manager="another-team")
    with pytest.raises(KubeError) as replaced:
        await c.kube.apply(config_map(c.namespace, "held", {"k": "3"}, uid=uid))
    assert replaced.value.status == 422 and replaced.value.replaced
    again = await c.kube.get("ConfigMap", c.namespace, "held")
    assert again is not None and again["data"] == {"k": "someone else's"}


async def an_apply_with_the_impossible_version_creates_only(c: Cluster) -> None:
    """The create-only apply (D191): with CREATE_ONLY_VERSION a missing object is created as any apply creates it
    (owned by the applying manager, at an ordinary version), and one that exists is refused with 409 and left as it
    is, for each kind of the first wave (Services have a storage of their own in kube-apiserver)."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "once", "namespace": c.namespace},
        "spec": {"clusterIP": "None", "selector": {"app": "x"}, "ports": [{"name": "http", "port": 80}]},
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "once", "namespace": c.namespace, "labels": {"app": "x"}},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "once", "namespace": c.namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    for obj in (config_map(c.namespace, "once", {"k": "1"}), service, account, role):
        kind = obj["kind"]
        create_only = copy.deepcopy(obj)
        create_only["metadata"]["resourceVersion"] = CREATE_ONLY_VERSION
        created = await c.kube.apply(copy.deepcopy(create_only))
        assert created["metadata"]["resourceVersion"] != CREATE_ONLY_VERSION, kind
        assert any(
            e["manager"] == FIELD_MANAGER and e["operation"] == "Apply" for e in created["metadata"]["managedFields"]
        ), kind
        with pytest.raises(KubeError) as taken:
            await c.kube.apply(copy.deepcopy(create_only))
        assert taken.value.status == 409 and not taken.value.replaced, (kind, taken.value)
        with pytest.raises(KubeError) as foreign:  # also when someone else's object is there
            await c.kube.apply(copy.deepcopy(create_only), manager="another-team")
        assert foreign.value.status == 409, (kind, foreign.value)
        after = await c.kube.get(kind, c.namespace, "once")
        assert after is not None and after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


SCENARIOS: list[Callable[[Cluster], Awaitable[None]]] = [
    apply_that_changes_nothing_writes_nothing,
    a_field_a_manager_stops_sending_goes_unless_another_owns_it,
    a_conflicting_apply_fails_unless_forced_and_force_takes_the_field,
    an_update_by_another_client_takes_the_fields_it_changes,
    an_item_another_client_adds_to_a_keyed_list_survives_a_forced_apply,
    replicas_stay_when_a_second_manager_co_owns_them,
    replicas_nobody_sends_fall_back_to_the_default,
    generation_counts_changes_to_the_spec_only,
    a_deployment_selector_must_match_its_template_and_never_changes,
    owner_references_merge_by_uid_and_only_one_may_be_the_controller,
    delete_honours_the_uid_precondition,
    dependents_go_with_their_owner,
    lists_filter_by_labels,
    kinds_the_server_does_not_serve_are_missing_apis,
    status_merge_patches_remove_what_is_null,
    missing_objects_read_as_none,
    an_apply_carrying_a_uid_writes_only_the_object_with_that_uid,
    an_apply_with_the_impossible_version_creates_only,
]
