"""Helpers to render examples the way `disagg render` does."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from disagg.api.deployment import DisaggDeployment
from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.plan import DeploymentPlan, build_plan
from disagg.render import render_deployment

NAMESPACE = "default"


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
    if obj["kind"] == "Deployment":
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
