"""Per-node KV daemons: the standalone Mooncake store (AgentX) and PegaFlow, with the host access each needs, and
what the engines on the node are told to reach them."""

from __future__ import annotations

import json
from typing import Any

import yaml

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.plan import build_plan
from disagg.render import render_plan
from tests.support.rendering import env_of, find

GPU_NODES = "{nodeSelector: {pool: gpu}, tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]}"
STANDALONE = f"""apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {{name: agentx}}
spec:
  model: {{name: Qwen/Qwen3-32B}}
  transfer: {{connector: mooncake, mooncake: {{protocol: tcp}}}}
  kvCache:
    store:
      type: mooncake
      pools: [prefill, decode]
      mooncake:
        mode: standalone
        protocol: tcp
        tenant: team-a
        client: {{segmentSize: 64Gi, offload: {{path: /mnt/nvme/mooncake, size: 1Ti}}}}
  prefill: {{replicas: 1, tensorParallel: 4, scheduling: {GPU_NODES}}}
  decode: {{replicas: 1, tensorParallel: 4, scheduling: {GPU_NODES}}}
"""
PEGAFLOW = """apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: pega}
spec:
  model: {name: Qwen/Qwen3-8B}
  engine: {pythonHashSeed: 42}
  kvCache:
    store:
      type: pegaflow
      pegaflow:
        server:
          image: registry.example.com/pegaflow:0.25.1
          poolSize: 30Gi
          ssdCache: {path: /mnt/nvme/pegaflow, size: 512Gi}
          nics: [mlx5_0, mlx5_1]
  prefill: {replicas: 1}
  decode: {replicas: 1}
"""


def content(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = load_documents(text)[0].content
    return loaded


def objects(text: str) -> list[dict[str, Any]]:
    result = validate_deployment(content(text))
    assert result.deployment is not None, result.problems
    return render_plan(build_plan(result.deployment, "ns"))


def kv_config(container: dict[str, Any]) -> dict[str, Any]:
    args = container["args"]
    parsed: dict[str, Any] = json.loads(args[args.index("--kv-transfer-config") + 1])
    return parsed


def test_a_standalone_mooncake_store_runs_one_client_per_engine_node_on_the_host_network() -> None:
    rendered = objects(STANDALONE)
    daemon = find(rendered, "DaemonSet", "agentx-kv-node")
    pod = daemon["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["tolerations"][0]["key"] == "gpu"
    (client,) = pod["containers"]
    assert client["command"] == ["mooncake_client"]
    assert client["args"] == [
        "--host=$(HOST_IP):50053",
        "--port=50052",
        f"--global_segment_size={64 << 30}",
        "--master_server_address=agentx-kv-store:50051",
        "--metadata_server=P2PHANDSHAKE",
        "--protocol=tcp",
        "--tenant_id=team-a",
        "--enable_offload=true",
    ]
    env = env_of(client)
    assert env["HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] == "/mnt/kv-ssd"
    assert env["MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"] == str(1 << 40)
    assert pod["volumes"] == [
        {"name": "kv-ssd", "hostPath": {"path": "/mnt/nvme/mooncake", "type": "DirectoryOrCreate"}}
    ]
    # The pool, the SSD tier's staging buffer (1280Mi, named so it is counted) and the daemon's own 1Gi.
    assert env["MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES"] == str(1280 << 20)
    assert client["resources"]["requests"]["memory"] == "67840Mi" == client["resources"]["limits"]["memory"]
    assert client["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}, "runAsUser": 0}
    master = find(rendered, "Deployment", "agentx-kv-store")["spec"]["template"]["spec"]["containers"][0]
    assert {"--enable_offload=true", "--enable_multi_tenants=true"} <= set(master["args"])


def test_a_multi_tenant_master_gets_the_quota_policy_it_refuses_to_start_without() -> None:
    """mooncake_master 0.3.13 with --enable_multi_tenants exits ("tenant quota file connector requires a non-empty
    uri") unless it is given a quota policy naming the tenants it admits."""
    rendered = objects(STANDALONE)
    pod = find(rendered, "Deployment", "agentx-kv-store")["spec"]["template"]["spec"]
    (master,) = pod["containers"]
    assert "--tenant_quota_connector_type=file" in master["args"]
    uri = next(a for a in master["args"] if a.startswith("--tenant_quota_connector_uri="))
    path = uri.split("=", 1)[1]
    (mount,) = master["volumeMounts"]
    assert path.startswith(mount["mountPath"] + "/")
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    data = find(rendered, "ConfigMap", volume["configMap"]["name"])["data"]
    policy = yaml.safe_load(data[path.rsplit("/", 1)[1]])
    assert policy == {"version": 1, "tenants": [{"name": "team-a", "quota": "1048576GB"}]}
    without_tenant = objects(STANDALONE.replace("        tenant: team-a\n", ""))
    master = find(without_tenant, "Deployment", "agentx-kv-store")["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in master["args"] if "tenant" in a] and master["volumeMounts"] == []


def test_standalone_engines_contribute_no_segment_and_put_into_their_nodes_client() -> None:
    rendered = objects(STANDALONE)
    config = json.loads(find(rendered, "ConfigMap", "agentx-kv-config")["data"]["mooncake.json"])
    assert config["mode"] == "standalone-store" and config["global_segment_size"] == 0
    assert config["enable_offload"] is True and config["tenant_id"] == "team-a"
    for role in ("prefill", "decode"):
        container = find(rendered, "Deployment", f"agentx-{role}")["spec"]["template"]["spec"]["containers"][0]
        env = env_of(container)
        # The segment name the client registers (--host=<node IP>:<segmentPort>), from the engine's own node.
        assert env["MOONCAKE_PREFERRED_SEGMENT"] == "$(HOST_IP):50053"
        assert env["HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
        # Only the local transfer buffer is pinned in the engine pod; the pool belongs to the client.
        assert container["resources"]["requests"]["memory"] == "4Gi"
        connectors = [c["kv_connector"] for c in kv_config(container)["kv_connector_extra_config"]["connectors"]]
        assert connectors == ["MooncakeConnector", "MooncakeStoreConnector"]


def test_an_embedded_store_runs_no_node_daemon() -> None:
    embedded = STANDALONE.replace("mode: standalone", "mode: embedded").replace(
        "        client: {segmentSize: 64Gi, offload: {path: /mnt/nvme/mooncake, size: 1Ti}}\n", ""
    )
    rendered = objects(embedded)
    assert not [o for o in rendered if o["kind"] == "DaemonSet"]
    config = json.loads(find(rendered, "ConfigMap", "agentx-kv-config")["data"]["mooncake.json"])
    assert config["mode"] == "embedded" and config["global_segment_size"] == 4 << 30


def test_standalone_and_embedded_settings_do_not_mix() -> None:
    doc = content(STANDALONE)
    doc["spec"]["kvCache"]["store"]["mooncake"]["globalSegmentSize"] = "8Gi"
    problems = validate_deployment(doc).problems
    assert [p.path for p in problems] == ["spec.kvCache.store.mooncake.globalSegmentSize"]
    doc = content(STANDALONE)
    doc["spec"]["kvCache"]["store"]["mooncake"]["mode"] = "embedded"
    problems = validate_deployment(doc).problems
    assert [p.path for p in problems] == ["spec.kvCache.store.mooncake.client"]
    assert "mode: standalone" in problems[0].fix


def test_pegaflow_runs_a_server_per_node_in_the_host_ipc_namespace_and_a_metaserver() -> None:
    rendered = objects(PEGAFLOW)
    pod = find(rendered, "DaemonSet", "pega-kv-node")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["hostIPC"] is True
    (server,) = pod["containers"]
    assert server["args"] == [
        "--addr",
        "$(HOST_IP):50055",
        "--http-addr",
        "0.0.0.0:9091",
        "--pool-size",
        "30gb",
        "--ssd-cache-path",
        "/mnt/kv-ssd/pegaflow.cache",
        "--ssd-cache-capacity",
        "512gb",
        "--nics",
        "mlx5_0",
        "mlx5_1",
        "--metaserver-addr",
        "http://pega-kv-store:50056",
    ]
    assert env_of(server)["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in server["resources"]["requests"]  # the engines hold the GPUs
    metaserver = find(rendered, "Deployment", "pega-kv-store")["spec"]["template"]["spec"]["containers"][0]
    assert metaserver["command"] == ["pegaflow-metaserver"] and metaserver["args"] == ["--addr", "0.0.0.0:50056"]


def test_pegaflow_engines_share_the_host_ipc_namespace_and_name_their_nodes_server() -> None:
    rendered = objects(PEGAFLOW)
    for role, mode in (("prefill", "read_write"), ("decode", "save_only")):
        pod = find(rendered, "Deployment", f"pega-{role}")["spec"]["template"]["spec"]
        assert pod["hostIPC"] is True
        container = pod["containers"][0]
        env = env_of(container)
        assert env["PEGAFLOW_HOST"] == "http://$(HOST_IP)" and env["PEGAFLOW_PORT"] == "50055"
        assert env["PYTHONHASHSEED"] == "42"
        nixl, pega = kv_config(container)["kv_connector_extra_config"]["connectors"]
        assert nixl["kv_connector"] == "NixlConnector"
        assert pega == {
            "kv_connector": "PegaKVConnector",
            "kv_role": "kv_both",
            "kv_connector_module_path": "pegaflow.connector",
            "kv_connector_extra_config": {"pegaflow.mode": mode},
        }
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_pegaflow_needs_nvidia_gpus_and_engines_off_the_host_network() -> None:
    doc = content(PEGAFLOW)
    doc["spec"]["decode"]["resources"] = {"gpuResourceName": "amd.com/gpu"}
    problems = validate_deployment(doc).problems
    assert [p.path for p in problems] == ["spec.decode.resources.gpuResourceName"]
    assert "CUDA IPC" in problems[0].message
    doc = content(PEGAFLOW)
    doc["spec"]["transfer"] = {"network": {"hostNetwork": True}}
    assert "spec.transfer.network.hostNetwork" in [p.path for p in validate_deployment(doc).problems]
