"""Pod identities (D77): a pod names only a ServiceAccount that exists, and only pods that call the Kubernetes API
get a token. Regressions: with a custom router the router pods named a ServiceAccount nothing created (example 13
never ran), and engine, render and KV-store pods mounted the namespace's token though they never call the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.support.rendering import example_deployment, pod_templates, rendered


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(obj["metadata"]["name"], template["spec"]) for obj in objects for template in pod_templates(obj)]


def _calls_the_api(pod: dict[str, Any]) -> bool:
    """vllm-router with Kubernetes discovery, or the operator's frontend, which watches the engine pods (unless told
    to learn MoRI-IO engines from their heartbeats instead)."""
    return any(
        "--service-discovery" in container.get("args", [])
        or (
            container.get("command") == ["disagg", "frontend"]
            and "moriio-registration" not in container.get("args", [])
        )
        for container in pod["containers"]
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_service_account_a_pod_names_exists_or_is_the_users(path: Path) -> None:
    objects = rendered(path)
    created = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "ServiceAccount"}
    spec = example_deployment(path).spec
    given = {pool.service_account_name for pool in (spec.prefill, spec.decode) if pool.service_account_name}
    for name, pod in _pods(objects):
        account = pod.get("serviceAccountName")
        assert account is None or account in created | given, f"{name} runs as {account}, which nothing creates"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_only_pods_that_call_the_api_get_a_token(path: Path) -> None:
    for name, pod in _pods(rendered(path)):
        if _calls_the_api(pod):
            assert pod.get("automountServiceAccountToken", True), name
            assert pod.get("serviceAccountName") == name, "the router runs as its own ServiceAccount"
        else:
            assert pod.get("automountServiceAccountToken") is False, f"{name} mounts a token it never uses"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_router_role_is_bound_only_to_a_router_that_discovers_pods(path: Path) -> None:
    objects = rendered(path)
    accounts = {pod.get("serviceAccountName") for _, pod in _pods(objects) if _calls_the_api(pod)}
    bound = {subject["name"] for obj in objects if obj["kind"] == "RoleBinding" for subject in obj["subjects"]}
    assert bound == accounts - {None}
