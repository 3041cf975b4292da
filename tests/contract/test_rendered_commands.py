"""Every rendered vLLM and vllm-router command line is accepted by the real parsers, exactly as written.

The examples get the operator's frontend (its arguments are checked against its own CLI in the unit tier,
tests/unit/plan/test_frontend_plan.py); vllm-router's arguments are checked for every example whose flow it can
drive, rendered with `implementation: vllm-router`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.plan import DeploymentPlan, build_plan
from tests.conftest import EXAMPLES
from tests.contract.conftest import run_checker
from tests.support.rendering import NAMESPACE, planned


def _with_vllm_router(path: Path) -> DeploymentPlan | None:
    """The example with vllm-router as its router, or None when vllm-router cannot drive its flow."""
    document = load_documents(path.read_text())[0].content
    frontend = document["spec"].setdefault("frontend", {})
    frontend["router"] = {**(frontend.get("router") or {}), "implementation": "vllm-router"}
    result = validate_deployment(document)
    if result.deployment is None:
        return None
    plan = build_plan(result.deployment, NAMESPACE)
    return plan if plan.router_argv else None


ROUTED = {path.stem: plan for path in EXAMPLES if (plan := _with_vllm_router(path)) is not None}


def _vllm_items() -> list[dict[str, Any]]:
    items = []
    for path in EXAMPLES:
        plan = planned(path)
        for engine in plan.engines:
            env = {k: v for k, v in engine.env.items() if not v.startswith("$(")}
            items.append({"id": f"{path.stem}/{engine.role}", "command": "serve", "argv": engine.argv, "env": env})
            if engine.worker_argv is not None:
                items.append(
                    {
                        "id": f"{path.stem}/{engine.role}-worker",
                        "command": "serve",
                        "argv": engine.worker_argv,
                        "env": env,
                    }
                )
        if plan.render_tier_argv is not None:
            items.append(
                {"id": f"{path.stem}/render", "command": "launch-render", "argv": plan.render_tier_argv, "env": {}}
            )
    return items


@pytest.fixture(scope="module")
def vllm_results() -> dict[str, dict[str, Any]]:
    return run_checker("vllm_argcheck.py", _vllm_items())


@pytest.fixture(scope="module")
def router_results() -> dict[str, dict[str, Any]]:
    items = [{"id": stem, "argv": plan.router_argv} for stem, plan in ROUTED.items()]
    return run_checker("router_argcheck.py", items)


@pytest.mark.parametrize("item", _vllm_items(), ids=lambda item: item["id"])
def test_vllm_parses_the_rendered_arguments(item: dict[str, Any], vllm_results: dict[str, dict[str, Any]]) -> None:
    result = vllm_results[item["id"]]
    assert result["ok"], result["error"]
    deprecated = [warning for warning in result["warnings"] if "deprecated" in warning.lower()]
    assert deprecated == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_vllm_builds_the_rendered_kv_transfer_config(path: Path, vllm_results: dict[str, dict[str, Any]]) -> None:
    for engine in planned(path).engines:
        built = vllm_results[f"{path.stem}/{engine.role}"]["kv_transfer_config"]
        assert engine.kv_transfer_config is not None and built is not None
        for key, value in engine.kv_transfer_config.items():
            assert built[key] == value, key


def test_parsed_values_are_the_ones_rendered(vllm_results: dict[str, dict[str, Any]]) -> None:
    parsed = vllm_results["10-qwen35-dep-multinode-decode/decode"]["parsed"]
    assert parsed["data_parallel_size"] == 8 and parsed["enable_expert_parallel"] is True
    worker = vllm_results["10-qwen35-dep-multinode-decode/decode-worker"]["parsed"]
    assert worker["headless"] is True and worker["launch_mode"] == "headless"
    tokens_only = vllm_results["12-render-tier-tokens-only/decode"]["parsed"]
    assert tokens_only["tokens_only"] is True
    assert vllm_results["12-render-tier-tokens-only/render"]["parsed"]["launch_mode"] == "render"


def test_the_vllm_checker_rejects_a_bad_flag() -> None:
    results = run_checker(
        "vllm_argcheck.py",
        [
            {"id": "abbrev", "command": "serve", "argv": ["m", "--tensor-parallel", "2"], "env": {}},
            {
                "id": "removed-key",
                "command": "serve",
                "argv": [
                    "m",
                    "--kv-transfer-config",
                    '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_rank":0}',
                ],
                "env": {},
            },
        ],
    )
    assert not results["abbrev"]["ok"] and not results["removed-key"]["ok"]


def test_vllm_router_variants_cover_the_flows_it_drives() -> None:
    assert {"01-minimal", "06-mooncake-store-agentic", "08-lmcache-shared-server"} <= set(ROUTED)
    assert not {"03-nixl-push-tp8-efa", "04-nixl-bidirectional-multiturn", "12-render-tier-tokens-only"} & set(ROUTED)


@pytest.mark.parametrize("stem", sorted(ROUTED))
def test_vllm_router_parses_the_rendered_arguments(stem: str, router_results: dict[str, dict[str, Any]]) -> None:
    result = router_results[stem]
    assert result["ok"], result["error"]
    assert result["warnings"] == []
    parsed = result["parsed"]
    assert parsed["vllm_pd_disaggregation"] is True
    assert parsed["host"] == "0.0.0.0" and parsed["prometheus_host"] == "0.0.0.0"
