"""The operator's frontend as the endpoint: what the planner renders is exactly what `disagg frontend` and its pod
contract read (operator/disagg/frontend/contract.py), for every example and flow."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import click
import pytest

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.cli.frontend import frontend as frontend_command
from disagg.frontend.contract import engine_from_pod
from disagg.plan import build_plan
from disagg.plan.model import Installation
from disagg.render import render_plan
from tests.conftest import EXAMPLES
from tests.support.rendering import find, pod_templates

FLOW_OF_EXAMPLE = {
    "01-minimal": "pull",
    "02-nixl-1p1d-two-gpus": "pull",
    "03-nixl-push-tp8-efa": "push",
    "04-nixl-bidirectional-multiturn": "bidirectional",
    "05-moriio-mi300x-single-node": "moriio-write",
    "06-mooncake-store-agentic": "mooncake",
    "07-offload-cpu-disk-tiers": "pull",
    "08-lmcache-shared-server": "pull",
    "09-glm52-moe-asymmetric-mtp": "pull",
    "10-qwen35-dep-multinode-decode": "pull",
    "11-hybrid-ssm-nemotron": "pull",
    "12-render-tier-tokens-only": "pull",
    "13-tilert-custom-decode": None,
    "14-decode-context-parallel": "pull",
    "15-qwen38-gb300-nvl72-computedomain": "pull",
    "16-mooncake-standalone-store": "mooncake",
    "17-pegaflow-pd": "pull",
}


def document(path: Path) -> dict[str, Any]:
    content: dict[str, Any] = load_documents(path.read_text())[0].content
    return content


def spec_document(spec: str) -> dict[str, Any]:
    return document_from(
        f"apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {{name: t}}\nspec:\n{spec}"
    )


def document_from(text: str) -> dict[str, Any]:
    content: dict[str, Any] = load_documents(text)[0].content
    return content


def planned(content: dict[str, Any], installation: Installation | None = None) -> Any:
    result = validate_deployment(content)
    assert result.deployment is not None, result.problems
    return build_plan(result.deployment, "ns", installation or Installation())


def parsed_frontend(argv: list[str]) -> dict[str, Any]:
    """The options `disagg frontend` would run with: the real click command parses the rendered arguments."""
    context = frontend_command.make_context("frontend", list(argv))
    return dict(context.params)


def running(template: dict[str, Any], name: str, ip: str) -> dict[str, Any]:
    """A pod made from a rendered template, as the API server would show it once it runs."""
    pod = copy.deepcopy(template)
    pod["metadata"] = {**pod["metadata"], "name": name, "uid": f"uid-{name}"}
    pod["status"] = {
        "phase": "Running",
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"restartCount": 0}],
    }
    return pod


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_gets_the_frontend_with_arguments_its_cli_accepts(path: Path) -> None:
    plan = planned(document(path))
    flow = FLOW_OF_EXAMPLE[path.stem]
    if flow is None:  # a custom router container fronts TileRT's decode servers
        assert plan.frontend_argv is None and plan.router == "custom"
        return
    assert plan.router == "disagg-frontend" and plan.router_argv is None
    options = parsed_frontend(plan.frontend_argv)
    assert options["flow"] == flow
    assert options["render"] is (path.stem == "12-render-tier-tokens-only")
    assert options["discovery"] == "kubernetes" and options["engine_port"] == 8000
    assert (options["port"], options["admin_port"]) == (8000, 8001)
    for role in ("prefill", "decode"):
        assert dict(s.split("=", 1) for s in options[f"{role}_selector"])["disagg.dev/role"] == role


@pytest.mark.parametrize("path", [p for p in EXAMPLES if FLOW_OF_EXAMPLE[p.stem]], ids=lambda p: p.stem)
def test_engine_pods_carry_the_contract_the_frontend_reads(path: Path) -> None:
    plan = planned(document(path))
    objects = render_plan(plan)
    engines = {}
    for role in ("prefill", "decode"):
        workload = next(o for o in objects if o["metadata"]["name"] == f"{plan.name}-{role}" and "spec" in o)
        template = pod_templates(workload)[0]
        engines[role] = engine_from_pod(running(template, f"{plan.name}-{role}-abc", "10.1.0.7"), 8000, role)
    prefill, decode = engines["prefill"], engines["decode"]
    assert prefill is not None and decode is not None
    # One revision on both pools, the planner's, with its generation.
    assert prefill.revision == decode.revision == plan.pairing.revision != ""
    assert prefill.generation == decode.generation == plan.pairing.generation
    # The engine id is the pod name, as the rendered kv_transfer_config says ($(POD_NAME)).
    assert prefill.engine_id == f"{plan.name}-prefill-abc"
    for command in plan.engines:
        assert command.kv_transfer_config["engine_id"] == "$(POD_NAME)"
    spec = validate_deployment(document(path)).deployment.spec  # type: ignore[union-attr]
    assert (prefill.tp_size, prefill.pp_size, prefill.dp_size) == (
        spec.prefill.tensor_parallel,
        spec.prefill.pipeline_parallel,
        spec.prefill.data_parallel,
    )
    assert prefill.url == "http://10.1.0.7:8000"
    connector = spec.transfer.connector
    if connector in ("nixl", "nixl-push"):
        assert prefill.side_channel_port == (spec.transfer.nixl.side_channel_port if spec.transfer.nixl else 5600)
    if connector == "moriio":
        assert spec.transfer.moriio is not None
        assert (prefill.moriio_handshake_port, prefill.moriio_notify_port) == (
            spec.transfer.moriio.handshake_port,
            spec.transfer.moriio.notify_port,
        )
    if connector == "mooncake":
        assert prefill.bootstrap_port == 8998


def test_the_frontend_pod_runs_the_installed_image_with_probes_and_pod_read_access_only() -> None:
    plan = planned(document(EXAMPLES[0]), Installation(frontend_image="registry.local/op:7"))
    objects = render_plan(plan)
    deployment = find(objects, "Deployment", "qwen3-32b-router")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.local/op:7"
    assert container["command"] == ["disagg", "frontend"] and container["args"] == plan.frontend_argv
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8000, "admin": 8001}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "qwen3-32b-router"
    role = find(objects, "Role", "qwen3-32b-router")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    # The admin API (probes, drains) is on the headless router Service only, never on the user-facing one.
    user = find(objects, "Service", "qwen3-32b")
    assert [p["targetPort"] for p in user["spec"]["ports"]] == ["http"]
    assert "sessionAffinity" not in user["spec"]
    headless = find(objects, "Service", "qwen3-32b-router")
    assert {p["name"] for p in headless["spec"]["ports"]} == {"http", "admin"}


def test_an_image_in_the_spec_wins_over_the_installation() -> None:
    content = document(EXAMPLES[0])
    content["spec"]["frontend"] = {"router": {"image": "mine/frontend:1"}}
    container = planned(content, Installation(frontend_image="op:1")).workloads[-1].pod.containers[0]
    assert container.image == "mine/frontend:1"


def test_bidirectional_keeps_clients_on_one_frontend_and_conversations_below_the_block_ttl() -> None:
    content = document(EXAMPLES[3])  # 04: blocksTtlSeconds 480
    plan = planned(content)
    options = parsed_frontend(plan.frontend_argv)
    assert (options["decoder_blocks_ttl"], options["conversation_ttl"]) == (480, 450)
    assert options["decode_policy"] == "consistent_hash"
    user = next(s for s in plan.services if s.name == plan.name)
    assert user.session_affinity == "ClientIP"
    content["spec"]["transfer"]["nixl"]["bidirectional"] = {"enabled": True, "blocksTtlSeconds": 20}
    content["spec"]["frontend"] = {}
    options = parsed_frontend(planned(content).frontend_argv)
    assert (options["decoder_blocks_ttl"], options["conversation_ttl"]) == (20, 10)
    # No policy in the spec: the frontend's own per-flow default (consistent hashing for bidirectional) applies.
    assert options["decode_policy"] is None


def test_vllm_router_stays_selectable_for_the_flows_it_drives() -> None:
    for transfer in (
        "{connector: nixl}",
        "{connector: lmcache}",
        "{connector: mooncake}",
        "{connector: moriio, moriio: {mode: read}}",
    ):
        plan = planned(
            spec_document(
                f"  model: {{name: m}}\n  transfer: {transfer}\n"
                "  frontend: {router: {implementation: vllm-router}}\n"
            )
        )
        assert plan.router == "vllm-router" and plan.router_argv is not None and plan.frontend_argv is None
        router = next(w for w in plan.workloads if w.name == "t-router").pod.containers[0]
        assert router.image == "ghcr.io/disagg-dev/vllm-router:0.1.17" and router.command == ["vllm-router"]


@pytest.mark.parametrize(
    ("transfer", "frontend", "message"),
    [
        ("{connector: nixl-push}", "{}", "cannot drive NIXL push"),
        ("{nixl: {bidirectional: {enabled: true}}}", "{}", "cannot drive bidirectional multi-turn"),
        ("{connector: moriio}", "{}", "cannot drive MoRI-IO write mode"),
        ("{}", "{render: {enabled: true}}", "cannot drive the render tier"),
    ],
)
def test_vllm_router_is_refused_for_a_flow_it_cannot_drive(transfer: str, frontend: str, message: str) -> None:
    content = spec_document(f"  model: {{name: m}}\n  transfer: {transfer}\n  frontend: {frontend}\n")
    content["spec"]["frontend"]["router"] = {"implementation": "vllm-router"}
    problems = validate_deployment(content).problems
    assert any(p.path == "spec.frontend.router.implementation" and message in p.message for p in problems), problems
    del content["spec"]["frontend"]["router"]
    assert validate_deployment(content).deployment is not None


def test_nixl_inside_a_custom_multiconnector_gets_its_side_channel_on_both_pools() -> None:
    spec = """  model: {name: m}
  transfer:
    connector: custom
    custom:
      connectorClass: MultiConnector
      routerProtocol: nixl
      extraConfig:
        connectors:
          - {kv_connector: NixlConnector, kv_role: kv_both, kv_connector_extra_config: {kv_recompute_threshold: 0}}
          - {kv_connector: PegaKVConnector, kv_role: kv_both, kv_connector_module_path: pegaflow.connector}
"""
    objects = render_plan(planned(spec_document(spec)))
    for role in ("prefill", "decode"):
        template = find(objects, "Deployment", f"t-{role}")["spec"]["template"]
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5600"
        assert template["metadata"]["annotations"]["disagg.dev/kv-side-channel-port"] == "5600"
        assert {"name": "nixl-0", "containerPort": 5600, "protocol": "TCP"} in template["spec"]["containers"][0][
            "ports"
        ]
    without = spec.replace("NixlConnector", "LMCacheConnectorV1")
    template = find(render_plan(planned(spec_document(without))), "Deployment", "t-prefill")["spec"]["template"]
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in {e["name"] for e in template["spec"]["containers"][0]["env"]}


def test_the_frontend_cli_refuses_what_it_is_not_given() -> None:
    """Guard for the test above: the click parse really validates (a wrong flow is refused)."""
    with pytest.raises(click.BadParameter):
        parsed_frontend(["--flow", "teleport"])
