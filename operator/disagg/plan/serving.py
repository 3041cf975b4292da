"""How the serving check reaches the P/D path, and what it gates (decided here, once).

- `pairs`: the frontend is the operator's own (`disagg frontend`: the default router, or a custom router container
  with an `admin` port; api/resolve.py probes_pairs decides it for the planner and validation alike): the check asks
  it to probe every prefill/decode pair through its admin API. With mode Enforce the engine pods get the serving
  readiness gate (Ready only once their pairs serve) and both pools roll with maxSurge 100%, maxUnavailable 0, so the
  operator can pace a rollout of the pairing revision without lowering capacity (D102, D103). LeaderWorkerSet pools
  get no gate: their group readiness and rollout are LeaderWorkerSet's (D104).
- `endpoint`: vllm-router, a custom router, or no router: one tiny completion through a pod behind the user-facing
  Service. It proves the endpoint answers, not which pairs work, so nothing is gated and nothing is remediated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disagg.api.resolve import ResolvedDeployment, probes_pairs
from disagg.api.resolve import gates_pools as resolved_gates_pools
from disagg.api.serving import CheckMode, RemediationAction, StuckPolicy
from disagg.api.units import parse_duration
from disagg.names import FRONTEND_ADMIN_PORT, Role, selector_labels

from .model import ContainerPlan, WorkloadPlan

ADMIN_PORT_NAME = FRONTEND_ADMIN_PORT
CheckMethod = Literal["pairs", "endpoint"]
DRAIN_SECONDS = 30
"""vLLM's --shutdown-timeout for gated engines whose spec leaves it unset. vLLM's own default (0) aborts in-flight
requests on SIGTERM, so every pod a paced rollout or a scale-down removes would fail the requests it was serving."""
PRE_STOP_SECONDS = 5
"""A gated engine pod marked for deletion waits this long before vLLM gets SIGTERM: the frontend's pod watch stops
choosing it first (a draining vLLM answers new requests 503)."""


def shutdown_timeout(configured: int | None, gated: bool) -> int | None:
    """The engine's --shutdown-timeout: the spec's, else DRAIN_SECONDS for gated pools, else vLLM's default."""
    if configured is not None:
        return configured
    return DRAIN_SECONDS if gated else None


def pre_stop(gated: bool) -> dict[str, Any] | None:
    """The engine container's lifecycle (gated pools only; see PRE_STOP_SECONDS)."""
    return {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}} if gated else None


@dataclass(frozen=True)
class ServingPlan:
    mode: CheckMode
    method: CheckMethod
    role: Role
    """Whose pods the check talks to: the router (frontend) or, without one, the decode pool."""
    selector: dict[str, str]
    port: int
    """The admin port (pairs) or the HTTP port (endpoint)."""
    gated: bool
    """Engine pods carry the serving readiness gate and the operator admits them."""
    interval: float
    deadline: float
    failure_threshold: int
    max_pairs: int
    action: RemediationAction
    cooldown: float
    drain_for: float
    progress_deadline: float
    on_stuck: StuckPolicy
    model: str
    """The served model name, for the endpoint check's request."""


def _container_port(container: ContainerPlan, name: str) -> int | None:
    for port in container.ports:
        if port.get("name") == name:
            return int(port["containerPort"])
    return None


def frontend_admin_port(router: WorkloadPlan | None) -> int | None:
    """The admin port of the operator's frontend, or None when the router is something else (or absent)."""
    if router is None:
        return None
    for container in router.pod.containers:
        found = _container_port(container, ADMIN_PORT_NAME)
        if found is not None:
            return found
    return None


def effective_mode(deployment: ResolvedDeployment, default: CheckMode) -> CheckMode:
    return deployment.serving.check.mode or default


def gates_pools(deployment: ResolvedDeployment, default: CheckMode) -> bool:
    """Whether engine pods get the serving readiness gate (single-node pools only): api/resolve.py decides it."""
    return resolved_gates_pools(deployment.router, deployment.frontend, effective_mode(deployment, default))


def plan_serving(
    deployment: ResolvedDeployment, router: WorkloadPlan | None, endpoint_port: int, default: CheckMode
) -> ServingPlan:
    check = deployment.serving.check
    remediation = deployment.serving.remediation
    rollout = deployment.serving.rollout
    admin = frontend_admin_port(router)
    role: Role
    if probes_pairs(deployment.router, deployment.frontend):
        # The planner places the admin port exactly when the router is the operator's frontend.
        assert admin is not None, "the operator's frontend has an admin port"
        method: CheckMethod = "pairs"
        role, port = "router", admin
    elif router is not None:
        method = "endpoint"
        role = "router"
        port = next((p for c in router.pod.containers if (p := _container_port(c, "http")) is not None), endpoint_port)
    else:
        method, role, port = "endpoint", "decode", endpoint_port
    selector = dict(deployment.decode.api_selector) if role == "decode" else selector_labels(deployment.name, role)
    return ServingPlan(
        mode=effective_mode(deployment, default),
        method=method,
        role=role,
        selector=selector,
        port=port,
        gated=gates_pools(deployment, default),
        interval=float(parse_duration(check.interval)),
        deadline=float(parse_duration(check.deadline)),
        failure_threshold=check.failure_threshold,
        max_pairs=check.max_pairs,
        action=remediation.action,
        cooldown=float(parse_duration(remediation.cooldown)),
        drain_for=float(parse_duration(remediation.drain_for)),
        progress_deadline=float(parse_duration(rollout.progress_deadline)),
        on_stuck=rollout.on_stuck,
        model=deployment.model.served_name or deployment.model.name,
    )
