"""Facts about the pods of the children other than engines, and scheduling fields every pod passes on: where the
KV store and the router run, which scheduler places a pool, custom pools under the serving gate, the router's
selector, the pull policy of router and KV-daemon images, and the store's metrics port."""

from __future__ import annotations

from typing import Any

from disagg.names import LABEL_ROLE, SERVING_GATE
from disagg.plan import build_plan
from disagg.render import render_plan
from tests.support.rendering import FRONTEND_ROUTER, deployment_from_yaml, find, pod_templates

GPU_NODES = "{nodeSelector: {pool: gpu}, tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]}"
MOONCAKE_STORE = """  transfer: {connector: mooncake, mooncake: {protocol: tcp}}
  kvCache:
    store:
      type: mooncake
      pools: [prefill, decode]
      mooncake: {protocol: tcp}
"""


def objects(spec: str) -> list[dict[str, Any]]:
    text = f"apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {{name: t}}\nspec:\n{spec}"
    return render_plan(build_plan(deployment_from_yaml(text), "ns"))


def pod_spec(rendered: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = pod_templates(find(rendered, kind, name))[0]["spec"]
    return spec


def test_the_kv_store_runs_on_the_nodes_of_the_pools_that_use_it() -> None:
    # A master on a node without the pools' taint toleration would stay Pending on a cluster of GPU nodes only.
    pools = f"  prefill: {{scheduling: {GPU_NODES}}}\n  decode: {{scheduling: {GPU_NODES}}}\n"
    spec = f"  model: {{name: m}}\n{MOONCAKE_STORE}{pools}"
    store = pod_spec(objects(spec), "Deployment", "t-kv-store")
    assert store["nodeSelector"] == {"pool": "gpu"}
    assert store["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_pool_asks_for_the_scheduler_its_spec_names() -> None:
    rendered = objects("  model: {name: m}\n  decode: {scheduling: {schedulerName: volcano}}\n")
    assert pod_spec(rendered, "Deployment", "t-decode")["schedulerName"] == "volcano"
    assert "schedulerName" not in pod_spec(rendered, "Deployment", "t-prefill")


def test_a_custom_engine_pool_carries_the_serving_gate_when_the_frontend_probes_pairs() -> None:
    custom = "  transfer: {connector: custom, custom: {connectorClass: X, routerProtocol: nixl}}\n"
    decode = "  decode: {customContainer: {image: x/y:1}}\n"
    rendered = objects("  model: {name: m}\n" + custom + decode + FRONTEND_ROUTER)
    pod = pod_spec(rendered, "Deployment", "t-decode")
    assert pod["readinessGates"] == [{"conditionType": SERVING_GATE}]
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}


def test_router_pods_run_where_their_placement_says() -> None:
    spec = "  model: {name: m}\n  frontend:\n    router:\n      placement: {nodeSelector: {pool: cpu}}\n"
    assert pod_spec(objects(spec), "Deployment", "t-router")["nodeSelector"] == {"pool": "cpu"}


def test_the_router_deployment_and_service_select_exactly_the_router_pods() -> None:
    rendered = objects("  model: {name: m}\n")
    deployment = find(rendered, "Deployment", "t-router")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert selector[LABEL_ROLE] == "router"
    assert find(rendered, "Service", "t-router")["spec"]["selector"] == selector
    for role in ("prefill", "decode"):  # no engine pod matches the router's selector, nor the router a pool's
        engine_labels = find(rendered, "Deployment", f"t-{role}")["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= engine_labels.items()
        pool_selector = find(rendered, "Deployment", f"t-{role}")["spec"]["selector"]["matchLabels"]
        assert not pool_selector.items() <= labels.items()


def test_router_and_kv_daemon_images_are_pulled_only_when_absent() -> None:
    # Images loaded into the node's runtime without a registry (air-gapped nodes, kind, the e2e node) must start.
    pega = """  engine: {pythonHashSeed: 42}
  kvCache:
    store:
      type: pegaflow
      pegaflow:
        server: {image: registry.example.com/pegaflow:0.25.1, poolSize: 30Gi}
"""
    cases = {
        ("Deployment", "t-router"): "  model: {name: m}\n" + FRONTEND_ROUTER,
        ("DaemonSet", "t-kv-node"): "  model: {name: m}\n" + pega,
        ("Deployment", "t-kv-store"): "  model: {name: m}\n" + MOONCAKE_STORE,
    }
    for (kind, name), spec in cases.items():
        (container,) = pod_spec(objects(spec), kind, name)["containers"]
        assert container["imagePullPolicy"] == "IfNotPresent", (kind, name)


def test_the_mooncake_master_serves_its_metrics_on_a_port_named_metrics() -> None:
    # The name a ServiceMonitor endpoint selects (`port: metrics`), as on vllm-router's pods.
    rendered = objects("  model: {name: m}\n" + MOONCAKE_STORE)
    (master,) = pod_spec(rendered, "Deployment", "t-kv-store")["containers"]
    metrics_flag = next(a for a in master["args"] if a.startswith("--metrics_port="))
    port = int(metrics_flag.split("=", 1)[1])
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in master["ports"]
    service_ports = find(rendered, "Service", "t-kv-store")["spec"]["ports"]
    assert {"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"} in service_ports
