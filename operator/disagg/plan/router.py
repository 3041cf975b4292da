"""The router in front of the engines: the operator's frontend (plan/frontend.py), vllm-router or a custom router
container; its RBAC and headless Service; and the user-facing Service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.api.frontend import DEFAULT_ROUTER_IMAGE, RouterSpec, ServiceSpec
from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import ResolvedDeployment, ResolvedPool, ResolvedTransfer
from disagg.names import child_name, common_labels, selector_labels

from .connectors.base import field_env
from .frontend import frontend_argv, frontend_container
from .model import ContainerPlan, Installation, PodPlan, RbacPlan, ServicePlan, WorkloadPlan
from .pod import RESTRICTED_CONTAINER, pool_host_env, router_resources, tolerations, user_env

ROUTER_ROLE_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
)
"""What the router's own Role grants: service discovery reads and watches the engine pods of its namespace."""

DEFAULT_PREFILL_POLICY = "cache_aware"
DEFAULT_DECODE_POLICY = "power_of_two"
ROUTER_PROTOCOL = {"nixl": "nixl", "nixl-push": "nixl", "mooncake": "mooncake", "moriio": "moriio", "lmcache": "nixl"}
"""The P/D protocol vllm-router speaks per connector. LMCache moves KV through its server, so the router only has to
run prefill before decode, which its NIXL mode does."""
APP_NAMES = {"disagg-frontend": "disagg-frontend", "vllm-router": "vllm-router", "custom": "custom-router"}


@dataclass(frozen=True)
class RouterPlan:
    workload: WorkloadPlan
    service: ServicePlan
    rbac: RbacPlan | None
    argv: list[str] | None
    """vllm-router's arguments."""
    frontend_argv: list[str] | None
    """`disagg frontend`'s arguments."""


def router_protocol(transfer: ResolvedTransfer) -> str | None:
    if transfer.connector == "custom":
        return transfer.custom.router_protocol if transfer.custom else None
    return ROUTER_PROTOCOL[transfer.connector]


def router_argv(router: RouterSpec, transfer: ResolvedTransfer, pools: tuple[ResolvedPool, ...]) -> list[str]:
    protocol = router_protocol(transfer)
    argv = ["--vllm-pd-disaggregation"]
    if protocol == "moriio":
        # MoRI-IO engines register themselves with the router over ZMQ instead of being discovered.
        argv += ["--vllm-discovery-address", f"0.0.0.0:{transfer.moriio.proxy_ping_port}"]
    else:
        argv += ["--service-discovery"]
        for pool in pools:
            argv += [f"--{pool.role}-selector", *(f"{key}={value}" for key, value in pool.api_selector.items())]
        argv += ["--service-discovery-namespace", "$(POD_NAMESPACE)", "--service-discovery-port", str(ENGINE_HTTP_PORT)]
    argv += ["--kv-connector", protocol or "nixl"]
    argv += ["--prefill-policy", router.prefill_policy or router.policy or DEFAULT_PREFILL_POLICY]
    argv += ["--decode-policy", router.decode_policy or router.policy or DEFAULT_DECODE_POLICY]
    argv += ["--host", "0.0.0.0", "--port", str(router.port)]
    argv += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(router.metrics_port)]
    argv += list(router.extra_args)
    return argv


def _vllm_router_container(
    deployment: ResolvedDeployment, env: list[dict[str, Any]]
) -> tuple[ContainerPlan, list[str]]:
    router = deployment.frontend.router
    transfer = deployment.transfer
    argv = router_argv(router, transfer, deployment.pools)
    ports: list[dict[str, Any]] = [
        {"name": "http", "containerPort": router.port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": router.metrics_port, "protocol": "TCP"},
    ]
    if router_protocol(transfer) == "moriio":
        ports.append({"name": "registration", "containerPort": transfer.moriio.proxy_ping_port, "protocol": "TCP"})
    container = ContainerPlan(
        name="router",
        image=router.image or DEFAULT_ROUTER_IMAGE,
        image_pull_policy="IfNotPresent",
        command=["vllm-router"],
        args=argv,
        env=[*env, *user_env(router.env)],
        ports=ports,
        resources=router_resources(router.resources),
        probes=http_probes("/liveness", "/readiness"),
        volume_mounts=[{"name": "tmp", "mountPath": "/tmp"}],
        security_context=RESTRICTED_CONTAINER,
    )
    return container, argv


def plan_router(deployment: ResolvedDeployment, installation: Installation) -> RouterPlan | None:
    kind = deployment.router
    if kind is None:
        return None
    router = deployment.frontend.router
    custom = router.custom_container
    name = child_name(deployment.name, "router")
    labels = common_labels(deployment.name, "router", app_name=APP_NAMES[kind])
    env = [field_env("POD_NAMESPACE", "metadata.namespace"), *pool_host_env(deployment.name)]
    argv: list[str] | None = None
    fe_argv: list[str] | None = None
    if custom is not None:
        container = ContainerPlan(
            name="router",
            image=custom.image,
            image_pull_policy="IfNotPresent",
            command=list(custom.command),
            args=list(custom.args),
            env=[*env, *user_env(custom.env), *user_env(router.env)],
            ports=[{"name": "http", "containerPort": custom.port, "protocol": "TCP"}]
            + [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in sorted(custom.extra_ports.items())],
            resources=router_resources(router.resources),
            probes=http_probes(custom.health_path, custom.health_path),
        )
    elif kind == "vllm-router":
        container, argv = _vllm_router_container(deployment, env)
    else:
        fe_argv = frontend_argv(deployment)
        container = frontend_container(deployment, installation, fe_argv, env)
    # Only routers that discover engine pods call the API (our frontend always; vllm-router except in MoRI-IO mode,
    # where engines register over ZMQ); every other router gets no identity and no token (D77).
    discovers = kind == "disagg-frontend" or (
        kind == "vllm-router" and router_protocol(deployment.transfer) != "moriio"
    )
    extra: dict[str, Any] = {"serviceAccountName": name} if discovers else {"automountServiceAccountToken": False}
    if router.placement.node_selector:
        extra["nodeSelector"] = dict(router.placement.node_selector)
    if router.placement.tolerations:
        extra["tolerations"] = tolerations(router.placement.tolerations)
    volumes: list[dict[str, Any]] = []
    if custom is None:
        extra["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        volumes.append({"name": "tmp", "emptyDir": {}})
    pod = PodPlan(labels=labels, annotations={}, containers=[container], volumes=volumes, spec_extra=extra)
    workload = WorkloadPlan(
        "Deployment",
        name,
        "router",
        labels,
        selector_labels(deployment.name, "router"),
        router.replicas,
        pod,
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    )
    service_ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in container.ports
    ]
    # Headless: engines (MoRI-IO registration), Prometheus and the operator reach each router pod by name (the
    # frontend's admin port too), and no Service address is spent; the user-facing `<name>` has the cluster IP.
    service = ServicePlan(name, labels, selector_labels(deployment.name, "router"), service_ports, headless=True)
    rules = [{key: list(value) for key, value in rule.items()} for rule in ROUTER_ROLE_RULES]
    rbac = RbacPlan(name, labels, rules) if discovers else None
    return RouterPlan(workload, service, rbac, argv, fe_argv)


def http_probes(liveness: str, readiness: str) -> dict[str, Any]:
    return {
        "livenessProbe": {
            "httpGet": {"path": liveness, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": readiness, "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 2,
            "timeoutSeconds": 5,
        },
    }


def user_facing_service(deployment: ResolvedDeployment, service: ServiceSpec, has_router: bool) -> ServicePlan:
    """The Service `<name>`: the router's API port when there is one, else the decode pool's API pods directly.
    The frontend's admin port is never on it. With bidirectional multi-turn, each client sticks to one router
    replica, whose conversation state lets the next turn read its history back."""
    name = deployment.name
    if has_router:
        selector = selector_labels(name, "router")
        labels = common_labels(name, "router", app_name=APP_NAMES[deployment.router or "custom"])
    else:
        selector = dict(deployment.decode.api_selector)
        labels = common_labels(name, "decode")
    sticky = has_router and deployment.router == "disagg-frontend" and deployment.flow == "bidirectional"
    return ServicePlan(
        name,
        {**service.labels, **labels},
        selector,
        [{"name": "http", "port": service.port, "targetPort": "http", "protocol": "TCP"}],
        annotations=dict(service.annotations),
        type=service.type,
        session_affinity="ClientIP" if sticky else None,
    )
