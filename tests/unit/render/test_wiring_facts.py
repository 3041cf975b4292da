"""Wiring facts that were guarded only by the golden files, asserted on every example (and on variants that turn
a setting on), so accepting a golden diff cannot erase them: where vLLM binds, which ports the side channels use
and declare, where the router discovers engines, what the router may read, what RDMA pods request, and what the
probes ask."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.render import render_deployment
from tests.conftest import EXAMPLES
from tests.support.rendering import deployment_from_yaml, env_of, example_deployment, find, pod_templates, rendered

POD_IP = {"fieldRef": {"fieldPath": "status.podIP"}}
VARIANTS = {
    "nixl-dp4-port-6100": """
  transfer: {nixl: {sideChannelPort: 6100}}
  decode: {dataParallel: 4, nodesPerReplica: 2, tensorParallel: 1}
""",
    "push-rdma-ib": """
  transfer:
    connector: nixl-push
    network: {rdma: {resourceName: rdma/ib, count: 2}, ipcLock: true}
  decode: {nodesPerReplica: 2, tensorParallel: 4}
""",
    "mooncake-port-9100": """
  transfer: {connector: mooncake, mooncake: {bootstrapPort: 9100}}
""",
    "moriio-ping-37000": """
  transfer: {connector: moriio, moriio: {proxyPingPort: 37000}}
""",
}


def variant(body: str) -> list[dict[str, Any]]:
    text = "apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {name: v}\nspec:\n"
    text += "  model: {name: org/model}\n" + body
    return render_deployment(deployment_from_yaml(text), "ns")


SOURCES: dict[str, Any] = {path.stem: path for path in EXAMPLES} | VARIANTS


def objects_of(source: str) -> list[dict[str, Any]]:
    value = SOURCES[source]
    return rendered(value) if isinstance(value, Path) else variant(value)


def spec_of(source: str) -> Any:
    value = SOURCES[source]
    if isinstance(value, Path):
        return example_deployment(value).spec
    text = "apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {name: v}\nspec:\n"
    return deployment_from_yaml(text + "  model: {name: org/model}\n" + value).spec


def engine_containers(objects: list[dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(role, template, container) of every vLLM engine container: prefill and decode, leaders and workers."""
    for obj in objects:
        role = obj["metadata"]["labels"].get("disagg.dev/role")
        if role not in ("prefill", "decode"):
            continue
        for index, template in enumerate(pod_templates(obj)):
            container = template["spec"]["containers"][0]
            if container["name"] != "vllm":
                continue  # a custom decode engine speaks its own protocol
            yield role, f"{obj['metadata']['name']}#{index}", container


def ports_of(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", [])}


def arg_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("source", SOURCES)
def test_vllm_binds_and_advertises_the_pod_ip(source: str) -> None:
    containers = list(engine_containers(objects_of(source)))
    assert containers
    for _, where, container in containers:
        env = env_of(container)
        assert env["VLLM_HOST_IP"] == POD_IP, where
        assert env["POD_IP"] == POD_IP, where


@pytest.mark.parametrize("source", SOURCES)
def test_the_nixl_side_channel_listens_on_the_ports_the_pods_declare(source: str) -> None:
    spec = spec_of(source)
    containers = list(engine_containers(objects_of(source)))
    if spec.transfer.connector not in ("nixl", "nixl-push"):
        assert all("VLLM_NIXL_SIDE_CHANNEL_PORT" not in env_of(c) for _, _, c in containers)
        return
    for role, where, container in containers:
        env = env_of(container)
        base = int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == POD_IP, where
        ranks = getattr(spec, role).data_parallel
        declared = {name: port for name, port in ports_of(container).items() if name.startswith("nixl-")}
        # Global rank r binds base + r; every pod of the replica declares the replica's whole range.
        assert declared == {f"nixl-{rank}": base + rank for rank in range(ranks)}, where
        assert ENGINE_HTTP_PORT not in declared.values(), where
        if spec.transfer.nixl is not None:
            assert base == spec.transfer.nixl.side_channel_port


@pytest.mark.parametrize("source", SOURCES)
def test_engines_serve_http_on_the_port_the_router_discovers(source: str) -> None:
    objects = objects_of(source)
    routers = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["labels"]["disagg.dev/role"] == "router"
    ]
    router = routers[0]["spec"]["template"]["spec"]["containers"][0] if routers else None
    if router is None or router["name"] != "router" or router.get("command") != ["vllm-router"]:
        return  # no router, or a custom one: it discovers engines its own way
    argv = router["args"]
    api_containers = [(w, c) for _, w, c in engine_containers(objects) if "--headless" not in c["args"]]
    assert api_containers
    for where, container in api_containers:
        assert ports_of(container)["http"] == ENGINE_HTTP_PORT, where
        assert arg_value(container["args"], "--port") == str(ENGINE_HTTP_PORT), where
    if "--service-discovery" in argv:
        assert arg_value(argv, "--service-discovery-port") == str(ENGINE_HTTP_PORT)
        assert arg_value(argv, "--service-discovery-namespace") == "$(POD_NAMESPACE)"
        assert env_of(router)["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    else:
        # MoRI-IO engines register with the router: the router listens where every engine pings.
        listen = int(arg_value(argv, "--vllm-discovery-address").rsplit(":", 1)[1])
        assert ports_of(router)["registration"] == listen
        for where, container in api_containers:
            config = json.loads(arg_value(container["args"], "--kv-transfer-config"))
            assert int(config["kv_connector_extra_config"]["proxy_ping_port"]) == listen, where


@pytest.mark.parametrize("source", SOURCES)
def test_the_router_may_read_and_watch_pods_in_its_namespace_and_nothing_else(source: str) -> None:
    objects = objects_of(source)
    routers = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["labels"]["disagg.dev/role"] == "router"
    ]
    assert routers, "every example has a router"
    container = routers[0]["spec"]["template"]["spec"]["containers"][0]
    # The operator's frontend finds engines by label selector, vllm-router by --service-discovery: both watch pods.
    watches = container.get("command", [])[:2] == ["disagg", "frontend"] or "--service-discovery" in container["args"]
    if not watches:
        # A custom router that does not call the API gets no identity and no token.
        assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding", "ServiceAccount")]
        assert routers[0]["spec"]["template"]["spec"].get("automountServiceAccountToken") is False
        return
    name = routers[0]["metadata"]["name"]
    role, binding = find(objects, "Role", name), find(objects, "RoleBinding", name)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    namespace = routers[0]["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    find(objects, "ServiceAccount", name)
    assert routers[0]["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]


@pytest.mark.parametrize("source", SOURCES)
def test_rdma_devices_and_memory_pinning_are_granted_exactly_when_asked(source: str) -> None:
    network = spec_of(source).transfer.network
    rdma = network.rdma
    for _, where, container in engine_containers(objects_of(source)):
        capabilities = (container.get("securityContext") or {}).get("capabilities", {}).get("add", [])
        assert ("IPC_LOCK" in capabilities) == network.ipc_lock, where
        resources = container["resources"]
        if rdma is None:
            assert not [r for r in resources.get("limits", {}) if "rdma" in r or "efa" in r], where
            continue
        count = str(rdma.count)
        assert resources["limits"][rdma.resource_name] == count, where
        assert resources["requests"][rdma.resource_name] == count, where  # extended resources: request == limit


@pytest.mark.parametrize("source", SOURCES)
def test_every_probe_asks_a_port_the_container_declares(source: str) -> None:
    checked = 0
    for obj in objects_of(source):
        for template in pod_templates(obj):
            for container in template["spec"]["containers"]:
                declared = ports_of(container)
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    action = container.get(probe, {}).get("httpGet") or container.get(probe, {}).get("tcpSocket")
                    if action is None:
                        continue
                    port = action["port"]
                    assert port in declared or port in declared.values(), (obj["metadata"]["name"], probe, port)
                    checked += 1
    assert checked


@pytest.mark.parametrize("source", SOURCES)
def test_engines_are_ready_when_vllm_says_it_is_healthy(source: str) -> None:
    for _, where, container in engine_containers(objects_of(source)):
        if "--headless" in container["args"]:
            assert "readinessProbe" not in container, where  # workers serve no HTTP; their leader is probed
            continue
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, (where, probe)


@pytest.mark.parametrize(
    ("router", "ready", "alive"),
    [
        # The operator's frontend is ready only while a complete pair exists (D90).
        ("{}", "/ready", "/health"),
        ("{implementation: vllm-router}", "/readiness", "/liveness"),
    ],
)
def test_the_router_is_ready_on_its_readiness_endpoint(router: str, ready: str, alive: str) -> None:
    (deployment,) = [
        obj
        for obj in variant(f"  frontend: {{router: {router}}}\n")
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "v-router"
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": ready, "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": alive, "port": "http"}


def test_a_custom_decode_engine_is_probed_on_its_own_health_path_and_port() -> None:
    objects = rendered(SOURCES["13-tilert-custom-decode"])
    custom = example_deployment(SOURCES["13-tilert-custom-decode"]).spec.decode.custom_container
    assert custom is not None
    container = find(objects, "Deployment", "glm51-tilert-decode")["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == custom.health_path
    assert ports_of(container)[container["readinessProbe"]["httpGet"]["port"]] == custom.port
