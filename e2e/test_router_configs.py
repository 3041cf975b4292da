"""Every router configuration the operator renders starts and finds its engines, as real pods on the real node.

For each policy of each router implementation and for one and two replicas per pool, a DisaggDeployment runs its
router in Kubernetes discovery mode, with the RBAC the operator rendered, in front of simulated engines
(images/vllm-sim answers vLLM's health checks): vllm-router (images/vllm-router) must register every engine pod of
both pools; the operator's frontend (`disagg frontend` from the operator image) must list every prefill x decode
pair, all of the one pairing revision the operator rendered. The operator runs out of cluster here (as in
test_operator.py); test_real_engines.py runs it in the cluster.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from disagg.api.frontend import FRONTEND_POLICIES, VLLM_ROUTER_POLICIES
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import REPO, OperatorProcess, wait_phase
from e2e.realnode_support import load_images, placement, require_real_node

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
POLICIES: dict[str, tuple[str, ...]] = {"vllm-router": VLLM_ROUTER_POLICIES, "disagg-frontend": FRONTEND_POLICIES}
SPEC = REPO / "e2e" / "specs" / "tiny-nixl-pull.yaml"
# ANSI colour codes in the router's log lines.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def images(kube_cluster: KubeCluster) -> dict[str, str]:
    require_real_node(kube_cluster)
    return load_images("operator", "router", "vllm-sim")


@pytest.fixture(scope="module")
def routers_namespace(kube_cluster: KubeCluster, operator: OperatorProcess) -> Iterator[str]:
    name = f"routers-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    wait_for(
        f"serviceaccount default in {name}", lambda: kube_cluster.run("get", "sa/default", "-n", name).returncode == 0
    )
    yield name
    kube_cluster.run("delete", "namespace", name, "--wait=false")


def _document(name: str, implementation: str, policy: str, replicas: int, images: dict[str, str]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    document["metadata"]["name"] = name
    spec = document["spec"]
    spec["engine"]["image"] = images["vllm-sim"]
    for pool in ("prefill", "decode"):
        spec[pool]["replicas"] = replicas
    router = spec["frontend"]["router"]
    image = images["router"] if implementation == "vllm-router" else images["operator"]
    router.update({"implementation": implementation, "image": image, "policy": policy})
    router["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"}}
    assert router["placement"]["nodeSelector"] == placement()["nodeSelector"]
    return document


def _router_log(kube: KubeCluster, namespace: str, name: str) -> str:
    return ANSI.sub("", kube.run("logs", "-n", namespace, f"deployment/{name}-router").stdout)


def _pairs(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The frontend's own view, from its admin port (the pod IP: the admin API is on no Service with an IP)."""
    (pod,) = kube.get("pods", "-n", namespace, "-l", f"disagg.dev/deployment={name},disagg.dev/role=router")["items"]
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8001/disagg/v1/pairs", timeout=10) as response:
        pairs: dict[str, Any] = json.loads(response.read())
    return pairs


def _all_pairs(kube: KubeCluster, namespace: str, name: str, count: int) -> dict[str, Any] | None:
    found = _pairs(kube, namespace, name)
    return found if len(found["pairs"]) == count else None


@pytest.mark.parametrize("implementation", ["vllm-router", "disagg-frontend"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_each_router_policy_starts_and_discovers_every_engine(
    kube_cluster: KubeCluster, routers_namespace: str, images: dict[str, str], replicas: int, implementation: str
) -> None:
    short = "vr" if implementation == "vllm-router" else "fe"
    names = {policy: f"{short}{replicas}-{policy.replace('_', '-')}" for policy in POLICIES[implementation]}
    for policy, name in names.items():
        document = _document(name, implementation, policy, replicas, images)
        kube_cluster.kubectl("apply", "-n", routers_namespace, "-f", "-", stdin=json.dumps(document))
    for policy, name in names.items():
        wait_phase(kube_cluster, routers_namespace, name, "Ready", timeout=600)
        deployment = kube_cluster.get("deployment", f"{name}-router", "-n", routers_namespace)
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--decode-policy") + 1] == policy
        log = _router_log(kube_cluster, routers_namespace, name)
        if implementation == "vllm-router":
            for role in ("prefill", "decode"):
                added = set(re.findall(rf"Added {role} server:? (http://[0-9.]+:8000)", log))
                assert len(added) == replicas, (policy, role, added, log[-2000:])
            assert "panicked" not in log and " ERROR " not in log, (policy, log[-2000:])
            continue
        revision = kube_cluster.get("disaggdeployment", name, "-n", routers_namespace)["status"]["pairingRevision"]
        pairs = wait_for(
            f"{name}: every prefill x decode pair listed",
            lambda name=name: _all_pairs(kube_cluster, routers_namespace, name, replicas * replicas),
            timeout=120,
        )
        assert {pair["revision"] for pair in pairs["pairs"]} == {revision}, pairs
        assert "Traceback" not in log and " ERROR " not in log, (policy, log[-2000:])
    for name in names.values():
        kube_cluster.run("delete", "disaggdeployment", name, "-n", routers_namespace, "--wait=false")
