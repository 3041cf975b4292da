"""The cluster itself behaves like a real GPU cluster: scheduling against GPU
capacity, kwok making pods Running/Ready, RBAC and garbage collection.

These guard the assumptions the operator's e2e tests build on.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import realnode
from e2e.localcluster.config import NODES_FILE, read_versions, real_node_wanted
from e2e.localcluster.testing import KubeCluster, KubectlError, wait_for
from e2e.operator_support import token_kubeconfig
from e2e.prerequisites import unavailable

pytestmark = pytest.mark.e2e

NVIDIA = ("nvidia.com/gpu", "nvidia.com/gpu.present")
AMD = ("amd.com/gpu", "amd.com/gpu.present")
RDMA = "rdma/ib"
GPUS_PER_NODE = 8


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    # Pods can only be created once the ServiceAccount admission finds `default`.
    wait_for(f"serviceaccount default in {name}", lambda: _exists(kube_cluster, "sa/default", name))
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def _exists(kube: KubeCluster, ref: str, namespace: str) -> bool:
    return kube.run("get", ref, "-n", namespace).returncode == 0


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m"}, "limits": limits},
                }
            ],
        },
    }


def _create_pod(kube: KubeCluster, namespace: str, name: str, limits: dict[str, str]) -> None:
    kube.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(_pod(name, limits)))


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _running_and_ready(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = kube.get("pod", name, "-n", namespace)
    ready = _condition(pod, "Ready")
    if pod["status"].get("phase") == "Running" and ready and ready["status"] == "True":
        return pod
    return None


def _node(kube: KubeCluster, name: str) -> dict[str, Any]:
    node: dict[str, Any] = kube.get("node", name)
    return node


def _nodes_with_label(kube: KubeCluster, label: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get("nodes", "-l", f"{label}=true")["items"]
    return items


def test_server_reports_the_built_version(kube_cluster: KubeCluster) -> None:
    if not kube_cluster.local:
        pytest.skip("version pin applies to the local control plane only")
    version = json.loads(kube_cluster.kubectl("version", "-o", "json"))
    # Unstamped builds report v0.0.0-master, which breaks Helm kubeVersion checks.
    assert version["serverVersion"]["gitVersion"] == read_versions()["K8S_VERSION"]


def test_all_nodes_ready(kube_cluster: KubeCluster) -> None:
    nodes = kube_cluster.get("nodes")["items"]
    not_ready = [n["metadata"]["name"] for n in nodes if (_condition(n, "Ready") or {}).get("status") != "True"]
    assert nodes
    assert not_ready == []
    if kube_cluster.local:
        expected = {d["metadata"]["name"] for d in yaml.safe_load_all(NODES_FILE.read_text()) if d}
        if real_node_wanted():
            expected.add(realnode.NODE_NAME)
        assert {n["metadata"]["name"] for n in nodes} == expected


@pytest.mark.parametrize(("resource", "label"), [NVIDIA, AMD])
def test_gpu_nodes_advertise_gpus_and_rdma(kube_cluster: KubeCluster, resource: str, label: str) -> None:
    nodes = _nodes_with_label(kube_cluster, label)
    if kube_cluster.local:
        assert len(nodes) == {NVIDIA[0]: 4, AMD[0]: 2}[resource]
    assert nodes, f"no node labelled {label}=true"
    for node in nodes:
        allocatable = node["status"]["allocatable"]
        assert allocatable.get(resource) == str(GPUS_PER_NODE), node["metadata"]["name"]
        assert allocatable.get(RDMA) == str(GPUS_PER_NODE), node["metadata"]["name"]


@pytest.mark.parametrize(("resource", "label"), [NVIDIA, AMD])
def test_gpu_pod_lands_on_matching_vendor_node_and_becomes_ready(
    kube_cluster: KubeCluster, namespace: str, resource: str, label: str
) -> None:
    _create_pod(kube_cluster, namespace, "gpu", {resource: "2", RDMA: "1"})
    pod = wait_for("GPU pod Running and Ready", lambda: _running_and_ready(kube_cluster, namespace, "gpu"))
    node = _node(kube_cluster, pod["spec"]["nodeName"])
    assert node["metadata"]["labels"].get(label) == "true"
    # No toleration was written: ExtendedResourceToleration added it because
    # the pod asks for the resource that GPU nodes are tainted with.
    tolerated = {t.get("key") for t in pod["spec"].get("tolerations", [])}
    assert resource in tolerated


def test_pod_without_gpus_avoids_gpu_nodes(kube_cluster: KubeCluster, namespace: str) -> None:
    _create_pod(kube_cluster, namespace, "router", {"cpu": "100m"})
    pod = wait_for("CPU pod Running and Ready", lambda: _running_and_ready(kube_cluster, namespace, "router"))
    labels = _node(kube_cluster, pod["spec"]["nodeName"])["metadata"]["labels"]
    assert NVIDIA[1] not in labels
    assert AMD[1] not in labels


def test_pod_asking_more_gpus_than_any_node_stays_pending(kube_cluster: KubeCluster, namespace: str) -> None:
    _create_pod(kube_cluster, namespace, "too-big", {NVIDIA[0]: str(GPUS_PER_NODE + 1)})

    def unschedulable() -> dict[str, Any] | None:
        cond = _condition(kube_cluster.get("pod", "too-big", "-n", namespace), "PodScheduled")
        return cond if cond and cond.get("reason") == "Unschedulable" else None

    cond = wait_for("scheduler to report Unschedulable", unschedulable)
    assert cond["status"] == "False"
    assert f"Insufficient {NVIDIA[0]}" in cond["message"]
    pod = kube_cluster.get("pod", "too-big", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert "nodeName" not in pod["spec"]


def test_rbac_denies_a_service_account_without_permissions(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube_cluster.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = kube_cluster.kubectl("create", "token", "nobody", "-n", namespace).strip()
    as_sa = token_kubeconfig(kube_cluster, token, tmp_path / "sa.kubeconfig")

    denied = kube_cluster.run("get", "pods", "-n", namespace, kubeconfig=as_sa)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert f"system:serviceaccount:{namespace}:nobody" in denied.stderr

    # Control: the same token works once a Role grants the verb, so the denial
    # above came from authorization, not from a broken token.
    kube_cluster.kubectl("create", "role", "pod-reader", "--verb=list", "--resource=pods", "-n", namespace)
    kube_cluster.kubectl(
        "create",
        "rolebinding",
        "nobody-reads",
        "--role=pod-reader",
        f"--serviceaccount={namespace}:nobody",
        "-n",
        namespace,
    )
    wait_for(
        "RBAC grant to take effect",
        lambda: kube_cluster.run("get", "pods", "-n", namespace, kubeconfig=as_sa).returncode == 0,
        timeout=30,
    )


def test_deleting_an_owner_garbage_collects_its_dependents(kube_cluster: KubeCluster, namespace: str) -> None:
    kube_cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner_uid = kube_cluster.get("configmap", "owner", "-n", namespace)["metadata"]["uid"]
    owned = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "owned",
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}],
        },
    }
    kube_cluster.apply(owned)
    kube_cluster.kubectl("create", "configmap", "bystander", "-n", namespace)

    kube_cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for("owned ConfigMap to be collected", lambda: not _exists(kube_cluster, "cm/owned", namespace), timeout=10)
    assert _exists(kube_cluster, "cm/bystander", namespace)


def _lws_served(kube: KubeCluster) -> bool:
    out = kube.kubectl("api-resources", "--api-group=leaderworkerset.x-k8s.io", "-o", "name")
    return "leaderworkersets.leaderworkerset.x-k8s.io" in out.split()


def test_leaderworkerset_groups_become_available(kube_cluster: KubeCluster, namespace: str) -> None:
    if not _lws_served(kube_cluster):
        if kube_cluster.local and os.environ.get("DISAGG_E2E_LWS", "1") != "0":
            pytest.fail("the local cluster should serve the LeaderWorkerSet API")
        unavailable("the LeaderWorkerSet API is not installed in this cluster")
    lws: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "pd", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": _pod("unused", {NVIDIA[0]: str(GPUS_PER_NODE)})["spec"]},
            },
        },
    }
    kube_cluster.apply(lws)

    def available() -> dict[str, Any] | None:
        obj: dict[str, Any] = kube_cluster.get("lws", "pd", "-n", namespace)
        cond = _condition(obj, "Available")
        return obj if cond and cond["status"] == "True" else None

    obj = wait_for("LeaderWorkerSet Available", available)
    assert obj["status"]["readyReplicas"] == 2
    pods = kube_cluster.get("pods", "-n", namespace, "-l", "leaderworkerset.sigs.k8s.io/name=pd")["items"]
    # 2 groups x (leader + 1 worker), each on its own 8-GPU node.
    assert len(pods) == 4
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    worker = next(p for p in pods if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1")
    # Written by LWS' pod webhook, which the apiserver reaches on loopback.
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0].get("env", [])}
    assert env["LWS_GROUP_SIZE"] == "2"
    assert env["LWS_LEADER_ADDRESS"].startswith("pd-")

    # Its validating webhook is live too: an inconsistent spec is refused.
    bad = copy.deepcopy(lws)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": 3}
    with pytest.raises(KubectlError, match="subGroupSize"):
        kube_cluster.apply(bad)
