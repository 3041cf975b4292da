"""Rules that flags alone cannot show: how pods, connectors, ports and the router are wired together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from disagg.api.units import parse_quantity
from disagg.plan import build_plan
from disagg.plan.model import Installation
from disagg.render import render_deployment, render_plan
from tests.conftest import EXAMPLES
from tests.support.rendering import (
    deployment_from_yaml,
    env_of,
    example_deployment,
    find,
    planned,
    pod_templates,
    rendered,
    router_selectors,
    with_spec,
)

BY_STEM = {path.stem: path for path in EXAMPLES}


def example(stem: str) -> Path:
    return BY_STEM[stem]


def engine_container(objects: list[dict[str, Any]], name: str, kind: str = "Deployment") -> dict[str, Any]:
    container: dict[str, Any] = pod_templates(find(objects, kind, name))[0]["spec"]["containers"][0]
    return container


def kv_config(container: dict[str, Any]) -> dict[str, Any]:
    args = container["args"]
    parsed: dict[str, Any] = json.loads(args[args.index("--kv-transfer-config") + 1])
    return parsed


NIXL_EXAMPLES = [
    "01-minimal",
    "02-nixl-1p1d-two-gpus",
    "03-nixl-push-tp8-efa",
    "04-nixl-bidirectional-multiturn",
    "09-glm52-moe-asymmetric-mtp",
    "11-hybrid-ssm-nemotron",
    "14-decode-context-parallel",
]


@pytest.mark.parametrize("stem", NIXL_EXAMPLES)
def test_nixl_side_channel_host_is_the_pod_ip(stem: str) -> None:
    objects = rendered(example(stem))
    name = planned(example(stem)).name
    for role in ("prefill", "decode"):
        env = env_of(engine_container(objects, f"{name}-{role}"))
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_one_side_channel_port_per_data_parallel_rank() -> None:
    objects = rendered(example("09-glm52-moe-asymmetric-mtp"))
    for role, ranks in (("prefill", 4), ("decode", 8)):
        ports = {p["name"]: p["containerPort"] for p in engine_container(objects, f"glm52-{role}")["ports"]}
        assert {name: port for name, port in ports.items() if name.startswith("nixl-")} == {
            f"nixl-{rank}": 5600 + rank for rank in range(ranks)
        }


@pytest.mark.parametrize("stem", NIXL_EXAMPLES)
def test_nixl_settings_are_identical_on_both_sides_except_the_role(stem: str) -> None:
    objects = rendered(example(stem))
    name = planned(example(stem)).name
    prefill = kv_config(engine_container(objects, f"{name}-prefill"))
    decode = kv_config(engine_container(objects, f"{name}-decode"))
    assert prefill.pop("kv_role") == "kv_producer"
    assert decode.pop("kv_role") == "kv_consumer"
    assert prefill == decode


def test_push_mode_uses_the_push_connector_on_both_pools() -> None:
    plan = planned(example("03-nixl-push-tp8-efa"))
    assert {engine.kv_transfer_config["kv_connector"] for engine in plan.engines} == {"NixlPushConnector"}


def test_bidirectional_settings_reach_both_pools() -> None:
    for engine in planned(example("04-nixl-bidirectional-multiturn")).engines:
        extra = engine.kv_transfer_config["kv_connector_extra_config"]
        assert extra["bidirectional_kv_xfer"] is True
        assert extra["decoder_kv_blocks_ttl"] == 480 and extra["kv_recompute_threshold"] == 64


def test_transfer_connectors_never_use_the_deprecated_kv_both_role() -> None:
    for path in EXAMPLES:
        for engine in planned(path).engines:
            config = engine.kv_transfer_config
            assert config["kv_role"] in ("kv_producer", "kv_consumer"), path.name


def test_multiconnector_combines_transfer_and_tiers_per_pool() -> None:
    plan = planned(example("07-offload-cpu-disk-tiers"))
    configs = {engine.role: engine.kv_transfer_config for engine in plan.engines}
    prefill_children = configs["prefill"]["kv_connector_extra_config"]["connectors"]
    decode_children = configs["decode"]["kv_connector_extra_config"]["connectors"]
    assert configs["prefill"]["kv_connector"] == configs["decode"]["kv_connector"] == "MultiConnector"
    assert [c["kv_connector"] for c in prefill_children] == ["NixlConnector", "OffloadingConnector"]
    assert prefill_children[1]["kv_connector_extra_config"]["spec_name"] == "TieringOffloadingSpec"
    assert prefill_children[1]["kv_connector_extra_config"]["secondary_tiers"] == [
        {"type": "fs", "root_dir": "/kv-cache"}
    ]
    assert decode_children[1]["kv_connector_extra_config"]["spec_name"] == "CPUOffloadingSpec"
    assert prefill_children[1]["kv_connector_extra_config"]["cpu_bytes_to_use"] == 100 * 2**30


def test_single_connector_is_not_wrapped() -> None:
    plan = planned(example("06-mooncake-store-agentic"))
    configs = {engine.role: engine.kv_transfer_config for engine in plan.engines}
    assert configs["decode"]["kv_connector"] == "MooncakeConnector"  # the store serves prefill only here
    children = configs["prefill"]["kv_connector_extra_config"]["connectors"]
    assert [c["kv_connector"] for c in children] == ["MooncakeConnector", "MooncakeStoreConnector"]


def test_pod_memory_grows_with_the_cpu_tier() -> None:
    objects = rendered(example("07-offload-cpu-disk-tiers"))
    resources = engine_container(objects, "qwen3-tiered-prefill")["resources"]
    assert parse_quantity(resources["limits"]["memory"]) == (64 + 100) * 2**30
    assert resources["requests"]["memory"] == resources["limits"]["memory"]


def test_mooncake_store_pins_its_segment_and_points_at_the_master() -> None:
    objects = rendered(example("06-mooncake-store-agentic"))
    config = json.loads(find(objects, "ConfigMap", "kimi-agentic-kv-config")["data"]["mooncake.json"])
    assert config["master_server_address"] == "kimi-agentic-kv-store:50051"
    assert config["global_segment_size"] == 80 * 2**30
    master = find(objects, "Deployment", "kimi-agentic-kv-store")["spec"]["template"]["spec"]["containers"][0]
    assert master["command"] == ["mooncake_master"] and "--rpc_port=50051" in master["args"]
    prefill = engine_container(objects, "kimi-agentic-prefill")
    assert env_of(prefill)["MOONCAKE_CONFIG_PATH"] == "/etc/disagg/kv/mooncake.json"
    assert parse_quantity(prefill["resources"]["requests"]["memory"]) == (80 + 4) * 2**30


def test_mooncake_prefill_advertises_its_bootstrap_port_to_either_router() -> None:
    objects = rendered(example("06-mooncake-store-agentic"))
    prefill = find(objects, "Deployment", "kimi-agentic-prefill")["spec"]["template"]
    assert prefill["metadata"]["annotations"]["vllm.ai/bootstrap-port"] == "8998"
    assert env_of(prefill["spec"]["containers"][0])["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert env_of(prefill["spec"]["containers"][0])["WITH_NVIDIA_PEERMEM"] == "0"
    frontend = planned(example("06-mooncake-store-agentic")).frontend_argv
    assert frontend is not None and frontend[frontend.index("--flow") + 1] == "mooncake"
    routed = build_plan(
        with_spec(example("06-mooncake-store-agentic"), frontend={"router": {"implementation": "vllm-router"}})
    )
    assert routed.router_argv is not None and routed.frontend_argv is None
    assert routed.router_argv[routed.router_argv.index("--kv-connector") + 1] == "mooncake"


def test_lmcache_pools_share_one_server() -> None:
    objects = rendered(example("08-lmcache-shared-server"))
    config = find(objects, "ConfigMap", "llama-lmcache-kv-config")["data"]["lmcache.yaml"]
    assert 'remote_url: "lm://llama-lmcache-kv-store:65432"' in config
    server = find(objects, "Deployment", "llama-lmcache-kv-store")["spec"]["template"]["spec"]["containers"][0]
    assert server["args"] == ["0.0.0.0", "65432", "cpu"]
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        assert kv_config(engine_container(objects, f"llama-lmcache-{role}")) == {
            "kv_connector": "LMCacheConnectorV1",
            "kv_role": kv_role,
            "engine_id": "$(POD_NAME)",
            "kv_load_failure_policy": "fail",
        }


def test_moriio_engines_are_found_from_their_pods_by_the_frontend() -> None:
    plan = planned(example("05-moriio-mi300x-single-node"))
    assert (
        plan.frontend_argv is not None and plan.frontend_argv[plan.frontend_argv.index("--flow") + 1] == "moriio-write"
    )
    for engine in plan.engines:
        extra = engine.kv_transfer_config["kv_connector_extra_config"]
        # No proxy_ip: the engines send no heartbeats; the frontend reads their ports from the pod contract.
        assert "proxy_ip" not in extra and extra["http_port"] == "8000"
    objects = rendered(example("05-moriio-mi300x-single-node"))
    for role in ("prefill", "decode"):
        annotations = find(objects, "Deployment", f"qwen3-235b-moriio-{role}")["spec"]["template"]["metadata"]
        assert annotations["annotations"]["disagg.dev/moriio-handshake-port"] == "6301"
        assert annotations["annotations"]["disagg.dev/moriio-notify-port"] == "6105"


def test_moriio_read_engines_register_with_vllm_router() -> None:
    deployment = with_spec(
        example("05-moriio-mi300x-single-node"),
        frontend={"router": {"implementation": "vllm-router"}},
        transfer={"moriio": {"mode": "read", "handshakePort": 6301, "notifyPort": 6105, "proxyPingPort": 36367}},
    )
    plan = build_plan(deployment, "default")
    for engine in plan.engines:
        extra = engine.kv_transfer_config["kv_connector_extra_config"]
        assert extra["proxy_ip"] == "qwen3-235b-moriio-router"
        assert extra["proxy_ping_port"] == "36367" and extra["http_port"] == "8000"
    assert plan.router_argv is not None
    assert "--vllm-discovery-address" in plan.router_argv and "--service-discovery" not in plan.router_argv
    objects = render_deployment(deployment, "default")
    router_service = find(objects, "Service", "qwen3-235b-moriio-router")
    assert {port["port"] for port in router_service["spec"]["ports"]} >= {36367}


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize(
    "stem", ["01-minimal", "06-mooncake-store-agentic", "10-qwen35-dep-multinode-decode", "12-render-tier-tokens-only"]
)
def test_router_selectors_match_exactly_the_api_pods_of_each_pool(stem: str) -> None:
    objects = rendered(example(stem))
    plan = planned(example(stem))
    templates: list[tuple[str, dict[str, str]]] = []
    for obj in objects:
        for index, template in enumerate(pod_templates(obj)):
            labels = dict(template["metadata"]["labels"])
            if obj["kind"] == "LeaderWorkerSet":
                # LeaderWorkerSet stamps the worker index on pods: 0 for leaders, 1.. for workers.
                labels["leaderworkerset.sigs.k8s.io/worker-index"] = "0" if index == 0 else "1"
            templates.append((f"{obj['metadata']['name']}#{index}", labels))
    selectors = router_selectors(plan)
    assert set(selectors) == ({"prefill", "decode", "render"} if "render" in stem else {"prefill", "decode"})
    for role, selector in selectors.items():
        matched = {name for name, labels in templates if _labels_match(selector, labels)}
        assert matched == {f"{plan.name}-{role}#0"}, (role, matched)


def test_multi_node_replica_is_a_leaderworkerset_with_headless_workers() -> None:
    objects = rendered(example("10-qwen35-dep-multinode-decode"))
    lws = find(objects, "LeaderWorkerSet", "qwen35-dep-decode")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader, worker = pod_templates(lws)
    leader_container, worker_container = leader["spec"]["containers"][0], worker["spec"]["containers"][0]
    assert "--headless" not in leader_container["args"] and "startupProbe" in leader_container
    assert "--headless" in worker_container["args"] and "startupProbe" not in worker_container
    assert worker_container["command"][:2] == ["/bin/sh", "-c"]
    assert "--data-parallel-start-rank $((LWS_WORKER_INDEX * 4))" in worker_container["command"][2]
    for container in (leader_container, worker_container):
        args = container["args"]
        assert args[args.index("--data-parallel-size-local") + 1] == "4"
        assert args[args.index("--data-parallel-address") + 1] == "$(LWS_LEADER_ADDRESS)"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    engine = next(e for e in planned(example("10-qwen35-dep-multinode-decode")).engines if e.role == "decode")
    assert engine.worker_argv is not None and engine.worker_argv[-2:] == ["--data-parallel-start-rank", "4"]


def test_every_pod_of_a_multi_node_replica_claims_the_compute_domain_channel() -> None:
    objects = rendered(example("15-qwen38-gb300-nvl72-computedomain"))
    for name in ("qwen38-prefill", "qwen38-decode"):
        templates = pod_templates(find(objects, "LeaderWorkerSet", name))
        assert len(templates) == 2  # leader and workers
        for template in templates:
            spec = template["spec"]
            assert spec["resourceClaims"] == [{"name": "nvlink", "resourceClaimTemplateName": "qwen38-nvl72-channel"}]
            assert spec["containers"][0]["resources"]["claims"] == [{"name": "nvlink"}]


def test_replica_topology_key_keeps_each_group_together_and_keeps_the_users_affinity() -> None:
    group_term = {
        "labelSelector": {"matchLabels": {"disagg.dev/deployment": "t", "disagg.dev/role": "decode"}},
        "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
        "topologyKey": "nvidia.com/gpu.clique",
    }
    users_term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    deployment = deployment_from_yaml(
        _BASE
        + "  decode:\n    dataParallel: 8\n    nodesPerReplica: 2\n    scheduling:\n"
        + "      replicaTopologyKey: nvidia.com/gpu.clique\n"
        + "      affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ["
        + json.dumps(users_term)
        + "]}}\n"
    )
    objects = render_deployment(deployment, "ns")
    for template in pod_templates(find(objects, "LeaderWorkerSet", "t-decode")):
        required = template["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required == [users_term, group_term]
    assert "affinity" not in pod_templates(find(objects, "Deployment", "t-prefill"))[0]["spec"]


def test_a_shared_resource_claim_is_referenced_by_name_and_pods_without_claims_have_none() -> None:
    deployment = deployment_from_yaml(
        _BASE + "  decode:\n    resources:\n      claims: [{name: nic, resourceClaimName: shared-nic}]\n"
    )
    objects = render_deployment(deployment, "ns")
    decode = pod_templates(find(objects, "Deployment", "t-decode"))[0]["spec"]
    assert decode["resourceClaims"] == [{"name": "nic", "resourceClaimName": "shared-nic"}]
    assert decode["containers"][0]["resources"]["claims"] == [{"name": "nic"}]
    prefill = pod_templates(find(objects, "Deployment", "t-prefill"))[0]["spec"]
    assert "resourceClaims" not in prefill and "claims" not in prefill["containers"][0]["resources"]


def test_rollout_defaults_per_role() -> None:
    # Without the serving gate (here: the check only reports) each role has its own defaults; behind the gate
    # (the default frontend, the check enforcing) both pools surge and keep every old pod until a new one serves.
    deployment = example_deployment(example("01-minimal"))
    for mode, expected in (
        ("Report", ({"maxSurge": 0, "maxUnavailable": 1}, {"maxSurge": 1, "maxUnavailable": 0})),
        ("Enforce", ({"maxSurge": "100%", "maxUnavailable": 0}, {"maxSurge": "100%", "maxUnavailable": 0})),
    ):
        objects = render_plan(build_plan(deployment, "default", Installation(serving_check=mode)))
        prefill = find(objects, "Deployment", "qwen3-32b-prefill")["spec"]["strategy"]["rollingUpdate"]
        decode = find(objects, "Deployment", "qwen3-32b-decode")["spec"]["strategy"]["rollingUpdate"]
        assert (prefill, decode) == expected, mode


def test_hybrid_models_get_the_ssm_preset() -> None:
    for engine in planned(example("11-hybrid-ssm-nemotron")).engines:
        assert engine.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
        assert "--no-disable-hybrid-kv-cache-manager" in engine.argv
    for engine in planned(example("01-minimal")).engines:
        assert "VLLM_SSM_CONV_STATE_LAYOUT" not in engine.env


def test_render_tier_shares_chat_flags_and_engines_go_tokens_only() -> None:
    plan = planned(example("12-render-tier-tokens-only"))
    assert plan.render_tier_argv is not None
    chat = ["--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice"]
    assert " ".join(chat) in " ".join(plan.render_tier_argv)
    for engine in plan.engines:
        assert "--tokens-only" in engine.argv and " ".join(chat) in " ".join(engine.argv)


def test_custom_decode_engine_and_plugin_connector() -> None:
    objects = rendered(example("13-tilert-custom-decode"))
    decode = engine_container(objects, "glm51-tilert-decode")
    assert decode["image"] == "registry.example.com/tilert:0.1.5"
    assert decode["command"] == ["python", "-m", "tilert.pd_vllm.decode_server"]
    assert env_of(decode)["DISAGG_DECODE_HOST"] == "glm51-tilert-decode-pool"
    prefill = engine_container(objects, "glm51-tilert-prefill")
    config = kv_config(prefill)
    assert config["kv_connector"] == "TileRTConnector"
    assert config["kv_connector_module_path"] == "tilert.pd_vllm.prefill_connector"
    # Kubernetes expands $(VAR) in args only for variables defined in the container's env.
    assert config["kv_connector_extra_config"]["tilert_host"] == "$(DISAGG_DECODE_HOST)"
    assert "DISAGG_DECODE_HOST" in env_of(prefill)
    service = find(objects, "Service", "glm51-tilert-decode-pool")
    assert {port["name"] for port in service["spec"]["ports"]} == {"http", "ctrl"}


def test_rdma_and_ipc_lock_only_when_asked() -> None:
    efa = engine_container(rendered(example("03-nixl-push-tp8-efa")), "qwen3-push-prefill")
    assert efa["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    assert efa["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert env_of(efa)["FI_PROVIDER"] == "efa"
    plain = engine_container(rendered(example("01-minimal")), "qwen3-32b-prefill")
    assert "securityContext" not in plain
    assert set(plain["resources"]["limits"]) == {"nvidia.com/gpu"}


def test_gpu_resource_follows_the_vendor() -> None:
    amd = engine_container(rendered(example("05-moriio-mi300x-single-node")), "qwen3-235b-moriio-decode")
    assert amd["resources"]["limits"] == {"amd.com/gpu": "4", "rdma/ib": "1"}


def test_probes_and_grace_period_suit_slow_engines() -> None:
    objects = rendered(example("09-glm52-moe-asymmetric-mtp"))
    pod = find(objects, "Deployment", "glm52-decode")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 1800
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    # The spec's shutdown timeout (300 s), the preStop sleep of gated pods (5 s) and 30 s for the rest.
    assert pod["terminationGracePeriodSeconds"] == 300 + 5 + 30
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["model"]["hostPath"]["path"] == "/mnt/model"


def test_gated_models_get_the_token_from_a_secret() -> None:
    container = engine_container(rendered(example("08-lmcache-shared-server")), "llama-lmcache-prefill")
    assert env_of(container)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}


_BASE = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: t}
spec:
  model: {name: m}
"""


def test_nofile_limit_wraps_the_engine_in_a_shell() -> None:
    deployment = deployment_from_yaml(_BASE + "  engine: {nofileLimit: 1048576}\n")
    container = engine_container(render_deployment(deployment, "ns"), "t-prefill")
    assert container["command"] == ["/bin/sh", "-c", 'ulimit -n 1048576 && exec vllm serve "$@"', "vllm-serve"]
    assert container["args"][0] == "m"


def test_children_of_a_deployment_read_from_a_cluster_carry_its_controller_reference() -> None:
    objects = render_deployment(deployment_from_yaml(_BASE.replace("{name: t}", "{name: t, uid: u-1}")), "ns")
    expected = {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "name": "t",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert objects and all(obj["metadata"]["ownerReferences"] == [expected] for obj in objects)
    assert all(obj["metadata"]["namespace"] == "ns" for obj in objects)
    assert all("ownerReferences" not in obj["metadata"] for obj in render_deployment(deployment_from_yaml(_BASE), "ns"))


def test_engine_flags_are_long_names() -> None:
    for path in EXAMPLES:
        plan = planned(path)
        argvs = [engine.argv for engine in plan.engines] + [plan.router_argv or [], plan.render_tier_argv or []]
        for argv in argvs:
            for token in argv:
                if token.startswith("-") and not token.lstrip("-").isdigit():
                    assert token.startswith("--"), (path.name, token)
