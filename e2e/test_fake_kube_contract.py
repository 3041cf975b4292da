"""The in-process tier's fake API server, held to a real kube-apiserver: the scenarios that
tests/unit/reconcile/test_fake_kube.py runs against the fake run here unchanged, through the operator's own
client (reconcile/kube.py) as cluster admin."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest
from tests.support import kube_scenarios
from tests.support.kube_scenarios import Cluster

from disagg.reconcile.kube import Kube
from e2e.localcluster.testing import KubeCluster
from e2e.operator_support import install_crd

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def with_crd(kube_cluster: KubeCluster) -> KubeCluster:
    install_crd(kube_cluster)
    return kube_cluster


@pytest.mark.parametrize("scenario", kube_scenarios.SCENARIOS, ids=lambda s: s.__name__)
async def test_the_real_api_server_agrees_with_the_fake(
    scenario: Callable[[Cluster], Awaitable[None]], with_crd: KubeCluster
) -> None:
    namespace = f"fake-contract-{uuid.uuid4().hex[:8]}"
    with_crd.kubectl("create", "namespace", namespace)
    kube = await Kube.connect(str(with_crd.kubeconfig))  # as cluster admin
    try:
        await scenario(Cluster(kube, kube.transport, namespace, settle_seconds=30))
    finally:
        await kube.close()
        with_crd.run("delete", "namespace", namespace, "--wait=false")
