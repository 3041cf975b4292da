"""Every router configuration the operator renders starts and finds its engines, as real pods on the real node.

For each policy the API allows and for one and two replicas per pool, a DisaggDeployment runs vllm-router (the
image built from images/vllm-router) in Kubernetes discovery mode, with the RBAC the operator rendered, in front of
simulated engines (images/vllm-sim answers vLLM's health checks). The router must become Ready and register every
engine pod of both pools. The operator runs out of cluster here (as in test_operator.py); test_real_engines.py runs
it in the cluster.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from disagg.api.frontend import RouterPolicy
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import REPO, OperatorProcess, wait_phase
from e2e.realnode_support import load_images, placement, require_real_node

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
POLICIES: tuple[str, ...] = RouterPolicy.__args__  # type: ignore[attr-defined]
SPEC = REPO / "e2e" / "specs" / "tiny-nixl-pull.yaml"
# ANSI colour codes in the router's log lines.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def images(kube_cluster: KubeCluster) -> dict[str, str]:
    require_real_node(kube_cluster)
    return load_images("router", "vllm-sim")


@pytest.fixture(scope="module")
def routers_namespace(kube_cluster: KubeCluster, operator: OperatorProcess) -> Iterator[str]:
    name = f"routers-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    wait_for(
        f"serviceaccount default in {name}", lambda: kube_cluster.run("get", "sa/default", "-n", name).returncode == 0
    )
    yield name
    kube_cluster.run("delete", "namespace", name, "--wait=false")


def _document(name: str, policy: str, replicas: int, images: dict[str, str]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    document["metadata"]["name"] = name
    spec = document["spec"]
    spec["engine"]["image"] = images["vllm-sim"]
    for pool in ("prefill", "decode"):
        spec[pool]["replicas"] = replicas
    router = spec["frontend"]["router"]
    router.update({"image": images["router"], "policy": policy})
    router["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"}}
    assert router["placement"]["nodeSelector"] == placement()["nodeSelector"]
    return document


def _router_log(kube: KubeCluster, namespace: str, name: str) -> str:
    return ANSI.sub("", kube.run("logs", "-n", namespace, f"deployment/{name}-router").stdout)


@pytest.mark.parametrize("replicas", [1, 2])
def test_each_router_policy_starts_and_discovers_every_engine(
    kube_cluster: KubeCluster, routers_namespace: str, images: dict[str, str], replicas: int
) -> None:
    names = {policy: f"r{replicas}-{policy.replace('_', '-')}" for policy in POLICIES}
    for policy, name in names.items():
        document = _document(name, policy, replicas, images)
        kube_cluster.kubectl("apply", "-n", routers_namespace, "-f", "-", stdin=json.dumps(document))
    for policy, name in names.items():
        wait_phase(kube_cluster, routers_namespace, name, "Ready", timeout=600)
        deployment = kube_cluster.get("deployment", f"{name}-router", "-n", routers_namespace)
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--decode-policy") + 1] == policy
        log = _router_log(kube_cluster, routers_namespace, name)
        for role in ("prefill", "decode"):
            added = set(re.findall(rf"Added {role} server:? (http://[0-9.]+:8000)", log))
            assert len(added) == replicas, (policy, role, added, log[-2000:])
        assert "panicked" not in log and " ERROR " not in log, (policy, log[-2000:])
    for name in names.values():
        kube_cluster.run("delete", "disaggdeployment", name, "-n", routers_namespace, "--wait=false")
