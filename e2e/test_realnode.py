"""The real node runs real pods with the data path the operator's rendered objects rely on.

What the operator renders needs, beyond a kubelet: pod-to-pod traffic (router -> engines, NIXL side channels),
the host reaching pod IPs (tests, Prometheus), Services with a virtual IP (the user-facing `<name>`) and headless
Services resolved by cluster DNS (`<name>-kv-store`, pool Services), in-cluster access to the API server (router
discovery, the operator itself), `kubectl logs/exec`, and nothing reachable beyond this machine. Each is checked
here with the simulator image (a small Python HTTP server built from images/vllm-sim).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.localcluster import realnode
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.realnode_support import load_images, placement, require_real_node

pytestmark = pytest.mark.e2e
SIM_PORT = 8000


@pytest.fixture(scope="module")
def sim_image(kube_cluster: KubeCluster) -> str:
    require_real_node(kube_cluster)
    return load_images("vllm-sim")["vllm-sim"]


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    wait_for(
        f"serviceaccount default in {name}", lambda: kube_cluster.run("get", "sa/default", "-n", name).returncode == 0
    )
    yield name
    kube_cluster.run("delete", "namespace", name, "--wait=false")


def _sim_pod(name: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            **placement(),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "sim",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "args": ["serve", "sim", "--port", str(SIM_PORT)],
                    "ports": [{"name": "http", "containerPort": SIM_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
        },
    }


def _ready_pod(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pod = kube.get("pod", name, "-n", namespace)
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return pod if conditions.get("Ready") == "True" else None

    return wait_for(f"pod {namespace}/{name} Ready on the real node", probe, timeout=120)


def _exec_python(kube: KubeCluster, namespace: str, pod: str, code: str) -> str:
    return kube.kubectl("exec", "-n", namespace, pod, "--", "python", "-c", code)


def _http_get_code(url: str, timeout: float = 3.0) -> str:
    return (
        "import urllib.request, sys\n"
        "try:\n"
        f"    print(urllib.request.urlopen({url!r}, timeout={timeout}).status)\n"
        "except Exception as e:\n"
        "    print('error', type(e).__name__)\n"
    )


def _default_gateway() -> str:
    """An address beyond this machine: its default route's next hop."""
    route = subprocess.run(["ip", "-4", "route", "show", "default"], capture_output=True, text=True, check=True)
    words = route.stdout.split()
    return words[words.index("via") + 1]


def test_real_node_registers_with_its_settings(kube_cluster: KubeCluster, sim_image: str) -> None:
    node = kube_cluster.get("node", realnode.NODE_NAME)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == str(realnode.GPUS)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(realnode.GPUS)
    assert {t["key"]: t["effect"] for t in node["spec"]["taints"]} == {realnode.TAINT["key"]: "NoSchedule"}
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == "198.18.0.1"


def test_pod_runs_and_kubectl_logs_and_exec_work(kube_cluster: KubeCluster, namespace: str, sim_image: str) -> None:
    kube_cluster.apply(
        {**_sim_pod("one", sim_image, {"app": "one"}), "metadata": {"name": "one", "namespace": namespace}}
    )
    pod = _ready_pod(kube_cluster, namespace, "one")
    assert pod["spec"]["nodeName"] == realnode.NODE_NAME
    assert "simulated vllm serve sim" in kube_cluster.kubectl("logs", "-n", namespace, "one")
    assert _exec_python(kube_cluster, namespace, "one", "import os; print(os.getuid())").strip() == "65532"
    # The host reaches the pod's address directly.
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{SIM_PORT}/health", timeout=5) as response:
        assert response.status == 200


def test_pods_services_dns_and_api_are_reachable_and_nothing_else(
    kube_cluster: KubeCluster, namespace: str, sim_image: str
) -> None:
    for name in ("client", "server"):
        pod = _sim_pod(name, sim_image, {"app": name})
        pod["metadata"]["namespace"] = namespace
        kube_cluster.apply(pod)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server", "namespace": namespace},
        "spec": {"selector": {"app": "server"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    kube_cluster.apply(service)
    headless = json.loads(json.dumps(service))
    headless["metadata"]["name"] = "server-pool"
    headless["spec"]["clusterIP"] = "None"
    kube_cluster.apply(headless)
    _ready_pod(kube_cluster, namespace, "client")
    server = _ready_pod(kube_cluster, namespace, "server")
    server_ip = server["status"]["podIP"]
    cluster_ip = kube_cluster.get("service", "server", "-n", namespace)["spec"]["clusterIP"]

    def from_client(url: str) -> str:
        return _exec_python(kube_cluster, namespace, "client", _http_get_code(url)).strip()

    assert from_client(f"http://{server_ip}:{SIM_PORT}/health") == "200"  # pod to pod
    # The Service's virtual IP (kube-proxy) and its DNS name, once its EndpointSlice lists the pod.
    wait_for("the ClusterIP to route to the pod", lambda: from_client(f"http://{cluster_ip}/health") == "200", 60)
    assert from_client(f"http://server.{namespace}.svc.cluster.local/health") == "200"
    assert from_client("http://server/health") == "200"  # the namespace's search path
    with urllib.request.urlopen(f"http://{cluster_ip}/health", timeout=5) as response:  # from the host
        assert response.status == 200
    resolved = _exec_python(
        kube_cluster,
        namespace,
        "client",
        f"import socket; print(sorted({{a[4][0] for a in socket.getaddrinfo('server-pool.{namespace}', {SIM_PORT})}}))",
    )
    assert resolved.strip() == str([server_ip])  # headless: the pod itself
    # The API server through the `kubernetes` Service, as in-cluster clients (router discovery) reach it.
    api = _exec_python(
        kube_cluster,
        namespace,
        "client",
        "import socket; socket.create_connection(('kubernetes.default.svc', 443), timeout=5); print('ok')",
    )
    assert api.strip() == "ok"
    # Nothing beyond the machine: no name resolves outside the cluster, and no address outside it is reached.
    outside = _exec_python(
        kube_cluster,
        namespace,
        "client",
        "import socket\n"
        "try:\n"
        "    socket.getaddrinfo('pypi.org', 443); print('resolved')\n"
        "except OSError:\n"
        "    print('unresolved')\n"
        "try:\n"
        f"    socket.create_connection(({_default_gateway()!r}, 80), timeout=3); print('connected')\n"
        "except OSError:\n"
        "    print('blocked')\n",
    )
    assert outside.split() == ["unresolved", "blocked"]
