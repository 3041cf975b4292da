"""The fake API server behaves like kube-apiserver where the reconciler relies on it.

The shared scenarios also run against a real API server (e2e/test_fake_kube_contract.py); the tests after them
cover answers the fake gives only when told to, or that a real cluster cannot be put into cheaply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from disagg.reconcile.kube import Kube, KubeError
from tests.support import kube_scenarios
from tests.support.fake_kube import FakeApiServer
from tests.support.kube_scenarios import Cluster, config_map


def fake_cluster() -> tuple[Cluster, FakeApiServer]:
    server = FakeApiServer(namespaces=("default", "scenario"))
    return Cluster(Kube(server), server, "scenario"), server


@pytest.mark.parametrize("scenario", kube_scenarios.SCENARIOS, ids=lambda s: s.__name__)
async def test_the_fake_follows_the_api_server(scenario: Callable[[Cluster], Awaitable[None]]) -> None:
    cluster, _ = fake_cluster()
    await scenario(cluster)


async def test_no_new_objects_in_a_terminating_namespace_but_updates_still_work() -> None:
    cluster, server = fake_cluster()
    await cluster.kube.apply(config_map("scenario", "before", {"k": "1"}))
    server.terminate_namespace("scenario")
    with pytest.raises(KubeError) as raised:
        await cluster.kube.apply(config_map("scenario", "after"))
    assert raised.value.namespace_terminating
    assert (await cluster.kube.apply(config_map("scenario", "before", {"k": "2"})))["data"] == {"k": "2"}


async def test_a_namespace_that_does_not_exist_is_not_found() -> None:
    cluster, _ = fake_cluster()
    with pytest.raises(KubeError) as raised:
        await cluster.kube.apply(config_map("elsewhere", "x"))
    assert raised.value.status == 404 and not raised.value.api_missing


async def test_an_unserved_kind_is_an_api_missing_error() -> None:
    cluster, server = fake_cluster()
    server.unserve("LeaderWorkerSet")
    with pytest.raises(KubeError) as raised:
        await cluster.kube.list("LeaderWorkerSet", "scenario", "a=b")
    assert raised.value.api_missing


async def test_injected_faults_answer_as_often_as_asked() -> None:
    cluster, server = fake_cluster()
    server.fail(500, "etcd is on fire", method="PATCH", kind="ConfigMap", times=2)
    for _ in range(2):
        with pytest.raises(KubeError) as raised:
            await cluster.kube.apply(config_map("scenario", "x"))
        assert raised.value.status == 500 and raised.value.transient and "etcd is on fire" in str(raised.value)
    assert (await cluster.kube.apply(config_map("scenario", "x")))["metadata"]["name"] == "x"


async def test_objects_with_finalizers_are_only_marked_for_deletion() -> None:
    cluster, server = fake_cluster()
    created = await cluster.kube.apply(config_map("scenario", "held", finalizers=["example.com/hold"]))
    await cluster.kube.delete("ConfigMap", "scenario", "held", created["metadata"]["uid"])
    held = server.get("ConfigMap", "scenario", "held")
    assert held is not None and held["metadata"]["deletionTimestamp"]


async def test_an_update_by_another_client_is_recorded_as_an_update_operation() -> None:
    cluster, server = fake_cluster()
    await cluster.kube.apply(config_map("scenario", "u", {"k": "1"}))
    server.update("ConfigMap", "scenario", "u", lambda obj: obj["data"].update(k="2"), manager="hpa")
    owners = server.owners("ConfigMap", "scenario", "u")
    assert ("f:data", "f:k") in owners["hpa/Update"]
    assert ("f:data", "f:k") not in owners["disagg-operator/Apply"]
