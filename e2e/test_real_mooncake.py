"""A standalone Mooncake store on the real node, over TCP: the daemons the operator renders run, and the addresses
it gives the engines reach them.

The operator (in the cluster, from its image, installed with Helm) deploys e2e/specs/tiny-mooncake-standalone.yaml:
its Mooncake master (`<name>-kv-store`) and the per-node `mooncake_client` DaemonSet (`<name>-kv-node`, host
network, a CPU pool and an SSD tier), both from images/mooncake (PyPI's mooncake-transfer-engine-non-cuda). vLLM's
Mooncake connectors need CUDA (MooncakeConnector asks torch.accelerator for a device, MooncakeStoreConnector
records CUDA events: shared/reference/flows-cpu.md), so the engines are the vLLM simulator and what a vLLM engine
would do with the store is done by a requester pod that carries an engine's own rendered environment and
configuration (MOONCAKE_CONFIG_PATH from the KV ConfigMap, MOONCAKE_PREFERRED_SEGMENT from its node's address):

- the client's segment is registered with the master under exactly the name the engines are told to put into;
- a requester with the engines' settings (standalone-store mode, no segment of its own, the deployment's tenant)
  puts into that segment over TCP and reads the bytes back, and the master accounts the bytes to the node's client.

The frontend's side of the Mooncake flow is proven against the protocol simulator
(tests/unit/frontend/test_sim_flows.py), since no CPU engine can run it.
"""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import install_crd
from e2e.realnode_support import (
    REPO_ROOT,
    HelmRelease,
    Served,
    ensure_namespace,
    load_images,
    placement,
    pods_of,
    require_real_node,
    serving,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
SPEC = REPO_ROOT / "e2e" / "specs" / "tiny-mooncake-standalone.yaml"
SEGMENT = 256 << 20

REQUESTER = r"""
import json, os, sys
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

config = json.load(open(os.environ["MOONCAKE_CONFIG_PATH"]))
assert config["mode"] == "standalone-store" and config["global_segment_size"] == 0, config
store = MooncakeDistributedStore()
kwargs = {"tenant_id": config["tenant_id"]} if config.get("tenant_id") else {}
ret = store.setup(os.environ["POD_IP"], config["metadata_server"], 0, config["local_buffer_size"],
                  config["protocol"], config["device_name"], config["master_server_address"], **kwargs)
assert ret == 0, f"setup returned {ret}"
replicate = ReplicateConfig()
replicate.preferred_segment = os.environ["MOONCAKE_PREFERRED_SEGMENT"]
value = os.urandom(1 << 20)
put = store.put("disagg-e2e-key", value, replicate)
got = store.get("disagg-e2e-key")
print(json.dumps({"put": put, "same": bytes(got) == value, "size": len(got)}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, dict[str, str]]]:
    require_real_node(kube_cluster)
    images = load_images("operator", "vllm-sim", "mooncake")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"mooncake-{suffix}"
    release = HelmRelease(f"dd-mc-{suffix}", f"disagg-mc-{suffix}", tmp_path_factory.mktemp("helm-home"))
    install_crd(kube_cluster)
    ensure_namespace(kube_cluster, namespace)
    release.install(kube_cluster, images["operator"], [namespace], "--set", "operator.resyncSeconds=30")
    document: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    document["spec"]["engine"]["image"] = images["vllm-sim"]
    mooncake = document["spec"]["kvCache"]["store"]["mooncake"]
    mooncake["masterImage"] = images["mooncake"]
    # The client is on the host network of a machine others test on too: ports of its own, an SSD directory too.
    mooncake["client"].update(port=free_port(), segmentPort=free_port())
    mooncake["client"]["offload"]["path"] = f"/tmp/disagg-e2e-mooncake-{suffix}"
    try:
        with serving(kube_cluster, namespace, document, timeout=600) as deployment:
            yield deployment, {"segment_port": str(mooncake["client"]["segmentPort"]), **images}
    finally:
        release.uninstall(kube_cluster)


def master_metrics(kube: KubeCluster, served: Served) -> dict[str, float]:
    (master,) = pods_of(kube, served, "kv-store")
    with urllib.request.urlopen(f"http://{master['status']['podIP']}:9003/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def test_the_nodes_client_registers_the_segment_the_engines_are_told_to_use(
    kube_cluster: KubeCluster, served: tuple[Served, dict[str, str]]
) -> None:
    deployment, facts = served
    (client,) = pods_of(kube_cluster, deployment, "kv-node")
    assert client["spec"]["hostNetwork"] is True and client["spec"]["nodeName"] == "real-0"
    (prefill,) = pods_of(kube_cluster, deployment, "prefill")
    env = {e["name"]: e.get("value") for e in prefill["spec"]["containers"][0]["env"]}
    assert env["MOONCAKE_PREFERRED_SEGMENT"] == f"$(HOST_IP):{facts['segment_port']}"
    segment = f"{prefill['status']['hostIP']}:{facts['segment_port']}"
    key = f'segment_total_capacity_bytes{{segment="{segment}"}}'
    metrics = wait_for(
        f"the master to list segment {segment}",
        lambda: found if key in (found := master_metrics(kube_cluster, deployment)) else None,
        timeout=60,
    )
    print(f"mooncake: segment {segment} registered with {metrics[key]:.0f} bytes")
    assert metrics[key] == SEGMENT


def test_a_requester_with_an_engines_settings_puts_into_and_gets_from_the_nodes_client(
    kube_cluster: KubeCluster, served: tuple[Served, dict[str, str]]
) -> None:
    deployment, facts = served
    (prefill,) = pods_of(kube_cluster, deployment, "prefill")
    engine = prefill["spec"]["containers"][0]
    keep = {"POD_IP", "HOST_IP", "MOONCAKE_CONFIG_PATH", "MOONCAKE_PREFERRED_SEGMENT"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "requester"},
        "spec": {
            **placement(),
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "requester",
                    "image": facts["mooncake"],
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", REQUESTER],
                    "env": [e for e in engine["env"] if e["name"] in keep],
                    "volumeMounts": [m for m in engine["volumeMounts"] if m["name"] == "kv-config"],
                }
            ],
            "volumes": [v for v in prefill["spec"]["volumes"] if v["name"] == "kv-config"],
        },
    }
    before = master_metrics(kube_cluster, deployment)
    kube_cluster.kubectl("apply", "-n", deployment.namespace, "-f", "-", stdin=json.dumps(pod))

    def finished() -> str | None:
        phase = kube_cluster.get("pod", "requester", "-n", deployment.namespace)["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("the requester to finish", finished, timeout=180, every=2)
    log = kube_cluster.run("logs", "-n", deployment.namespace, "requester").stdout
    assert phase == "Succeeded", log[-3000:]
    # Mooncake's own log lines (glog, on stderr) share the pod's log and go on after the result when it exits.
    result = json.loads(next(line for line in reversed(log.splitlines()) if line.startswith("{")))
    after = master_metrics(kube_cluster, deployment)
    segment = f"{prefill['status']['hostIP']}:{facts['segment_port']}"
    allocated = f'segment_allocated_bytes{{segment="{segment}"}}'
    print(f"mooncake: requester put {result}; the node's client holds {after.get(allocated, 0):.0f} bytes")
    assert result == {"put": 0, "same": True, "size": 1 << 20}
    assert after.get(allocated, 0) - before.get(allocated, 0) >= 1 << 20
