"""Pod facts of the engines that only the golden files used to pin (found by mutation testing): the KV disk tier's
volume is the one the engine mounts, for each kind of source; every mount names a volume of its pod and every volume
is mounted; huge pages are requested and mounted; a pool's CPU request reaches its pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from disagg.api.units import parse_quantity
from disagg.names import LABEL_DEPLOYMENT, LABEL_ROLE, LWS_WORKER_INDEX_LABEL
from disagg.render import render_deployment
from tests.support.rendering import deployment_from_yaml, find, pod_templates
from tests.unit.render.test_wiring_facts import SOURCES as WIRING_SOURCES
from tests.unit.render.test_wiring_facts import objects_of, variant

SOURCES = {
    "emptyDir": ("{emptyDir: {sizeLimit: 200Gi}}", {"emptyDir": {"sizeLimit": "200Gi"}}),
    "emptyDir without a limit": ("{emptyDir: {}}", {"emptyDir": {}}),
    "persistentVolumeClaim": (
        "{persistentVolumeClaim: {claimName: kv}}",
        {"persistentVolumeClaim": {"claimName": "kv"}},
    ),
    "hostPath": ("{hostPath: {path: /mnt/kv}}", {"hostPath": {"path": "/mnt/kv", "type": "DirectoryOrCreate"}}),
}


def prefill_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = pod_templates(find(objects, "Deployment", "v-prefill"))[0]["spec"]
    return spec


@pytest.mark.parametrize(("volume", "expected"), SOURCES.values(), ids=SOURCES.keys())
def test_the_disk_tier_volume_is_the_one_the_engine_mounts(volume: str, expected: dict[str, Any]) -> None:
    body = f"  kvCache:\n    cpu: {{size: 8Gi}}\n    disk: {{pools: [prefill], volume: {volume}}}\n"
    pod = prefill_pod(variant(body))
    disk = [v for v in pod["volumes"] if v.get("name") == "kv-disk"]
    assert disk == [{"name": "kv-disk", **expected}]
    mounts = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    assert "kv-disk" in mounts


def test_a_pool_s_cpu_request_reaches_its_engine_containers() -> None:
    pod = prefill_pod(variant("  prefill: {resources: {cpu: '12', memory: 64Gi}}\n"))
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == "12"


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(obj["metadata"]["name"], pod["spec"]) for obj in objects for pod in pod_templates(obj)]


@pytest.mark.parametrize("source", WIRING_SOURCES)
def test_every_mount_names_a_volume_of_its_pod_and_every_volume_is_mounted(source: str) -> None:
    for name, pod in _pods(objects_of(source)):
        volumes = {volume["name"] for volume in pod.get("volumes", [])}
        containers = [*pod.get("initContainers", []), *pod["containers"]]
        mounted = {mount["name"] for c in containers for mount in c.get("volumeMounts", [])}
        assert mounted <= volumes, f"{name} mounts volumes it does not have: {sorted(mounted - volumes)}"
        assert volumes <= mounted, f"{name} has volumes nothing mounts: {sorted(volumes - mounted)}"


def test_huge_pages_are_requested_and_mounted_at_their_page_size() -> None:
    body = "  transfer: {network: {hugepages: {pageSize: 1Gi, size: 4Gi}}}\n"
    body += "  prefill: {resources: {memory: 64Gi}}\n  decode: {resources: {memory: 64Gi}}\n"
    pod = prefill_pod(variant(body))
    assert {"name": "hugepages", "emptyDir": {"medium": "HugePages-1Gi"}} in pod["volumes"]
    container = pod["containers"][0]
    assert "hugepages" in {mount["name"] for mount in container["volumeMounts"]}
    assert container["resources"]["requests"]["hugepages-1Gi"] == "4Gi"
    assert container["resources"]["limits"]["hugepages-1Gi"] == "4Gi"


@pytest.mark.parametrize("source", WIRING_SOURCES)
def test_every_probe_names_a_port_its_container_declares_and_ports_say_their_protocol(source: str) -> None:
    for name, pod in _pods(objects_of(source)):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            ports = container.get("ports", [])
            assert all(port["protocol"] in ("TCP", "UDP", "SCTP") for port in ports), name
            declared = {port["name"] for port in ports}
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = container.get(kind) or {}
                for action in ("httpGet", "tcpSocket", "grpc"):
                    port = (probe.get(action) or {}).get("port")
                    if isinstance(port, str):
                        assert port in declared, f"{name}/{container['name']} {kind} probes undeclared port {port}"


def test_the_pegaflow_node_server_is_a_kv_node_daemon_ready_on_its_http_health() -> None:
    daemons = [o for o in objects_of("17-pegaflow-pd") if o["kind"] == "DaemonSet"]
    assert len(daemons) == 1
    labels = daemons[0]["spec"]["template"]["metadata"]["labels"]
    assert labels["disagg.dev/role"] == "kv-node" and labels["app.kubernetes.io/name"] == "pegaflow-server"
    assert daemons[0]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    container = daemons[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    http = next(port for port in container["ports"] if port["name"] == "http")
    assert f"0.0.0.0:{http['containerPort']}" in container["args"]  # the server's --http-addr


def test_the_render_tier_gets_its_workers_and_default_resources() -> None:
    objects = objects_of("12-render-tier-tokens-only")
    container = find(objects, "Deployment", "qwen3-tokens-only-render")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][container["args"].index("--renderer-num-workers") + 1] == "4"
    bare = variant("  frontend: {render: {enabled: true}}\n")
    render = next(
        o for o in bare if o["kind"] == "Deployment" and o["metadata"]["labels"]["disagg.dev/role"] == "render"
    )
    resources = render["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"], "a render tier without resources still requests CPU and memory (the defaults)"


def test_affinity_reaches_the_pod_with_kubernetes_field_names() -> None:
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    pod = prefill_pod(variant(f"  prefill:\n    scheduling: {{affinity: {json.dumps(affinity)}}}\n"))
    assert pod["affinity"] == affinity


def test_the_render_tier_s_deployment_and_service_select_its_pods_only() -> None:
    objects = variant("  frontend: {render: {enabled: true}}\n")
    render = find(objects, "Deployment", "v-render")
    selector = {LABEL_DEPLOYMENT: "v", LABEL_ROLE: "render"}
    assert render["spec"]["selector"]["matchLabels"] == selector
    assert selector.items() <= render["spec"]["template"]["metadata"]["labels"].items()
    assert find(objects, "Service", "v-render")["spec"]["selector"] == selector
    for other in ("v-prefill", "v-decode", "v-router"):  # no other pod carries the render role
        labels = find(objects, "Deployment", other)["spec"]["template"]["metadata"]["labels"]
        assert labels[LABEL_ROLE] != "render"


def test_host_network_pods_still_resolve_cluster_names() -> None:
    """On the host's network a pod gets the node's resolver unless dnsPolicy says otherwise; engines and the router
    must still resolve Services (the model store, the router's discovery)."""
    objects = variant("  transfer: {network: {hostNetwork: true}}\n")
    for name in ("v-prefill", "v-decode"):
        pod = (
            prefill_pod(objects) if name == "v-prefill" else pod_templates(find(objects, "Deployment", name))[0]["spec"]
        )
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet", name
    router = pod_templates(find(objects, "Deployment", "v-router"))[0]["spec"]
    assert router.get("dnsPolicy", "ClusterFirst") == "ClusterFirst" and not router.get("hostNetwork")


def _flag(args: list[str], flag: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == flag:
            return args[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def test_every_parallelism_of_a_pool_reaches_its_engine_together() -> None:
    objects = variant("  decode: {tensorParallel: 2, pipelineParallel: 2, decodeContextParallel: 2}\n")
    container = pod_templates(find(objects, "Deployment", "v-decode"))[0]["spec"]["containers"][0]
    args = [*container.get("command", []), *container.get("args", [])]
    assert _flag(args, "--tensor-parallel-size") == "2"
    assert _flag(args, "--pipeline-parallel-size") == "2"
    assert _flag(args, "--decode-context-parallel-size") == "2"


def test_an_engine_that_stops_answering_is_unready_within_10_s_and_restarted_after_30_s() -> None:
    """docs/rendering.md: readiness drops after two failed checks 5 s apart; liveness restarts the container after
    three failed checks 10 s apart, once the startup probe has passed."""
    pod = prefill_pod(variant(""))
    engine = pod["containers"][0]
    readiness, liveness = engine["readinessProbe"], engine["livenessProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] == 10
    assert liveness["periodSeconds"] * liveness["failureThreshold"] == 30
    assert engine["startupProbe"]["httpGet"] == liveness["httpGet"] == readiness["httpGet"]


@pytest.mark.parametrize(
    ("custom", "protocol"),
    [
        ("routerProtocol: nixl", "nixl"),
        ("routerProtocol: mooncake", "mooncake"),
        ("routerProtocol: moriio, extraConfig: {read_mode: true}", "moriio"),
    ],
)
def test_vllm_router_speaks_the_protocol_a_custom_connector_names(custom: str, protocol: str) -> None:
    objects = variant(
        "  frontend: {router: {implementation: vllm-router}}\n"
        f"  transfer: {{connector: custom, custom: {{connectorClass: X, {custom}}}}}\n"
    )
    container = pod_templates(find(objects, "Deployment", "v-router"))[0]["spec"]["containers"][0]
    assert _flag(container["args"], "--kv-connector") == protocol


def test_the_render_tier_trusts_remote_code_exactly_when_the_model_does() -> None:
    for trust in (True, False):
        text = "apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {name: v}\nspec:\n"
        text += f"  model: {{name: org/model, trustRemoteCode: {str(trust).lower()}}}\n"
        text += "  frontend: {render: {enabled: true}}\n"
        objects = render_deployment(deployment_from_yaml(text), "ns")
        container = pod_templates(find(objects, "Deployment", "v-render"))[0]["spec"]["containers"][0]
        assert ("--trust-remote-code" in container.get("args", [])) is trust


@pytest.mark.parametrize("body", ["", "  frontend: {router: {implementation: vllm-router}}\n"])
def test_the_endpoint_service_is_labelled_with_the_role_it_sends_to(body: str) -> None:
    service = find(variant(body), "Service", "v")
    assert service["metadata"]["labels"][LABEL_ROLE] == "router"
    assert service["spec"]["selector"][LABEL_ROLE] == "router"


def _containers(source: str) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for obj in objects_of(source):
        for template in pod_templates(obj):
            role = template["metadata"]["labels"].get(LABEL_ROLE, "")
            spec = template["spec"]
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                found.append((f"{obj['metadata']['name']}/{container['name']}", role, container))
    return found


@pytest.mark.parametrize("source", WIRING_SOURCES)
def test_every_resource_amount_is_a_quantity_within_its_limit_and_helpers_stay_small(source: str) -> None:
    """What the API server would refuse (an amount that is not a quantity, a request above its limit) and what no
    node could schedule: the components beside the engines (router, render tier, KV store and per-node daemons)
    request at most 2 cores each (their memory is the store's size where they hold KV)."""
    for name, role, container in _containers(source):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        amounts = {resource: parse_quantity(amount) for resource, amount in {**requests, **limits}.items()}
        for resource, amount in requests.items():
            if resource in limits:
                assert parse_quantity(amount) <= parse_quantity(limits[resource]), (name, resource)
        if role not in ("prefill", "decode"):
            assert parse_quantity(requests.get("cpu", "0")) <= 2, (name, requests)
        assert all(amount >= 0 for amount in amounts.values()), name


@pytest.mark.parametrize("source", WIRING_SOURCES)
def test_every_service_selects_the_pods_of_a_workload_it_renders(source: str) -> None:
    objects = objects_of(source)
    pod_labels = [template["metadata"]["labels"] for obj in objects for template in pod_templates(obj)]
    for service in (obj for obj in objects if obj["kind"] == "Service"):
        selector = dict(service["spec"].get("selector") or {})
        assert selector, service["metadata"]["name"]
        # The LeaderWorkerSet controller labels each pod with its worker index (0: the leader, whose template is
        # the leader template); the templates do not carry it.
        selector.pop(LWS_WORKER_INDEX_LABEL, None)
        assert any(selector.items() <= labels.items() for labels in pod_labels), service["metadata"]["name"]


def test_the_pegaflow_server_advertises_its_node_s_address() -> None:
    objects = objects_of("17-pegaflow-pd")
    server = next(
        container
        for obj in objects
        if obj["kind"] == "DaemonSet"
        for template in pod_templates(obj)
        for container in template["spec"]["containers"]
        if any(e["name"] == "PEGAFLOW_HOST_IP" for e in container.get("env", []))
    )
    env = server["env"]
    names = [e["name"] for e in env]
    host = env[names.index("HOST_IP")]
    assert host["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env[names.index("PEGAFLOW_HOST_IP")]["value"] == "$(HOST_IP)"
    assert names.index("HOST_IP") < names.index("PEGAFLOW_HOST_IP")  # $(VAR) expands only variables set before it


@pytest.mark.parametrize("source", WIRING_SOURCES)
def test_every_container_names_an_image(source: str) -> None:
    for name, _, container in _containers(source):
        assert isinstance(container.get("image"), str) and container["image"], name


def test_the_lmcache_server_runs_the_engines_image_unless_the_store_names_one() -> None:
    """LMCache's server ships in the engine image (example 08); a store block may name another."""
    shared = objects_of("08-lmcache-shared-server")
    [server] = [c for name, role, c in _containers("08-lmcache-shared-server") if role == "kv-store"]
    assert server["image"] == "lmcache/vllm-openai:v0.5.6"
    engine = pod_templates(find(shared, "Deployment", "llama-lmcache-prefill"))[0]["spec"]["containers"][0]
    assert engine["image"] == server["image"]
    own = variant("  kvCache: {store: {type: lmcache, lmcache: {serverImage: 'lmcache/server:1'}}}\n")
    [store] = [
        c for obj in own for t in pod_templates(obj) for c in t["spec"]["containers"] if c["name"] == "lmcache-server"
    ]
    assert store["image"] == "lmcache/server:1"
