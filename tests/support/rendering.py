"""Helpers to render examples the way `disagg render` does."""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path
from typing import Any

from disagg.api.deployment import DisaggDeployment
from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.plan import DeploymentPlan, build_plan
from disagg.render import render_deployment

NAMESPACE = "default"
# A spec fragment: a frontend served by a custom router container exposing the admin port, so the serving check can
# probe pairs and single-node engine pools are gated.
FRONTEND_ROUTER = """  frontend:
    router:
      customContainer:
        image: ghcr.io/disagg-dev/disagg-operator:0.1.0
        command: [disagg, frontend]
        extraPorts: {admin: 8001}
"""


@cache
def example_deployment(path: Path) -> DisaggDeployment:
    result = validate_deployment(load_documents(path.read_text())[0].content)
    assert result.deployment is not None, result.problems
    return result.deployment


def deployment_from_yaml(text: str) -> DisaggDeployment:
    result = validate_deployment(load_documents(text)[0].content)
    assert result.deployment is not None, result.problems
    return result.deployment


def rendered(path: Path) -> list[dict[str, Any]]:
    return render_deployment(example_deployment(path), NAMESPACE)


def planned(path: Path) -> DeploymentPlan:
    return build_plan(example_deployment(path), NAMESPACE)


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a workload object (two for a LeaderWorkerSet)."""
    if obj["kind"] in ("Deployment", "DaemonSet"):
        return [obj["spec"]["template"]]
    if obj["kind"] == "LeaderWorkerSet":
        template = obj["spec"]["leaderWorkerTemplate"]
        return [template["leaderTemplate"], template["workerTemplate"]]
    return []


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [obj for obj in objects if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container.get("env", [])}


def router_selectors(plan: DeploymentPlan) -> dict[str, dict[str, str]]:
    """The engine pods each router finds: vllm-router's `--<role>-selector k=v k=v ...` or the frontend's
    repeated `--<role>-selector k=v`."""
    selectors: dict[str, dict[str, str]] = {}
    if plan.frontend_argv is not None:
        argv = plan.frontend_argv
        for flag, value in itertools.pairwise(argv):
            if flag.endswith("-selector") and flag.startswith("--"):
                role = flag.removeprefix("--").removesuffix("-selector")
                key, _, label = value.partition("=")
                selectors.setdefault(role, {})[key] = label
        return selectors
    assert plan.router_argv is not None, "no router"
    argv = plan.router_argv
    for role in ("prefill", "decode"):
        start = argv.index(f"--{role}-selector") + 1
        items = []
        for token in argv[start:]:
            if token.startswith("--"):
                break
            items.append(token)
        selectors[role] = dict(item.split("=", 1) for item in items)
    return selectors


def with_spec(path: Path, **changes: Any) -> DisaggDeployment:
    """An example with top-level spec blocks merged (one level deep), e.g. frontend={"router": {...}}."""
    document = load_documents(path.read_text())[0].content
    for key, value in changes.items():
        block = document["spec"].setdefault(key, {})
        for inner, setting in value.items():
            if isinstance(setting, dict) and isinstance(block.get(inner), dict):
                block[inner] = {**block[inner], **setting}
            else:
                block[inner] = setting
    result = validate_deployment(document)
    assert result.deployment is not None, result.problems
    return result.deployment
