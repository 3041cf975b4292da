"""Child names and labels. Selectors use only the stable subset, never the image or a revision hash."""

from __future__ import annotations

from typing import Literal

Role = Literal["prefill", "decode", "router", "render", "kv-store"]

MANAGED_BY = "disagg-operator"
LABEL_DEPLOYMENT = "disagg.dev/deployment"
LABEL_ROLE = "disagg.dev/role"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
BOOTSTRAP_PORT_ANNOTATION = "vllm.ai/bootstrap-port"
"""vllm-router reads the Mooncake bootstrap port of a discovered prefill pod from this fixed annotation."""

_APP_NAME: dict[Role, str] = {
    "prefill": "vllm",
    "decode": "vllm",
    "router": "vllm-router",
    "render": "vllm-render",
    "kv-store": "kv-store",
}


def child_name(deployment: str, role: Role) -> str:
    return f"{deployment}-{role}"


def pool_service_name(deployment: str, role: Role) -> str:
    """The ClusterIP Service in front of a pool's API pods (LeaderWorkerSet owns `<name>-<role>` itself)."""
    return f"{deployment}-{role}-pool"


def kv_config_name(deployment: str) -> str:
    return f"{deployment}-kv-config"


def selector_labels(deployment: str, role: Role) -> dict[str, str]:
    """The labels that select a role's pods: stable across revisions."""
    return {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role}


def common_labels(deployment: str, role: Role, app_name: str | None = None) -> dict[str, str]:
    """Every child carries these; they sort deterministically."""
    return {
        "app.kubernetes.io/name": app_name or _APP_NAME[role],
        "app.kubernetes.io/instance": deployment,
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_DEPLOYMENT: deployment,
        LABEL_ROLE: role,
    }
