"""vllm-router in P/D mode (or a custom router container), its RBAC, and the user-facing Service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.api.frontend import ResourceRequirements, RouterSpec, ServiceSpec
from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import ResolvedDeployment, ResolvedPool, ResolvedTransfer
from disagg.names import child_name, common_labels, selector_labels

from .connectors.base import field_env
from .model import ContainerPlan, PodPlan, RbacPlan, ServicePlan, WorkloadPlan
from .pod import container_resources, pool_host_env, tolerations, user_env

ROUTER_ROLE_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
)
"""What the router's own Role grants: service discovery reads and watches the engine pods of its namespace."""

DEFAULT_PREFILL_POLICY = "cache_aware"
DEFAULT_DECODE_POLICY = "power_of_two"
ROUTER_PROTOCOL = {"nixl": "nixl", "nixl-push": "nixl", "mooncake": "mooncake", "moriio": "moriio", "lmcache": "nixl"}
"""The P/D protocol vllm-router speaks per connector. LMCache moves KV through its server, so the router only has to
run prefill before decode, which its NIXL mode does."""


@dataclass(frozen=True)
class RouterPlan:
    workload: WorkloadPlan
    service: ServicePlan
    rbac: RbacPlan | None
    argv: list[str] | None


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


def plan_router(deployment: ResolvedDeployment) -> RouterPlan | None:
    router = deployment.frontend.router
    transfer = deployment.transfer
    custom = router.custom_container
    protocol = router_protocol(transfer)
    if custom is None and protocol is None:
        return None
    name = child_name(deployment.name, "router")
    labels = common_labels(deployment.name, "router", app_name="custom-router" if custom else None)
    env = [field_env("POD_NAMESPACE", "metadata.namespace"), *pool_host_env(deployment.name)]
    port = custom.port if custom else router.port
    ports: list[dict[str, Any]] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    argv: list[str] | None = None
    if custom is not None:
        container = ContainerPlan(
            name="router",
            image=custom.image,
            image_pull_policy="IfNotPresent",
            command=list(custom.command),
            args=list(custom.args),
            env=[*env, *user_env(custom.env), *user_env(router.env)],
            ports=ports
            + [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in sorted(custom.extra_ports.items())],
            resources=_resources(router.resources),
            probes=_router_probes(custom.health_path, custom.health_path),
        )
    else:
        argv = router_argv(router, transfer, deployment.pools)
        ports.append({"name": "metrics", "containerPort": router.metrics_port, "protocol": "TCP"})
        if protocol == "moriio":
            ports.append({"name": "registration", "containerPort": transfer.moriio.proxy_ping_port, "protocol": "TCP"})
        container = ContainerPlan(
            name="router",
            image=router.image,
            image_pull_policy="IfNotPresent",
            command=["vllm-router"],
            args=argv,
            env=[*env, *user_env(router.env)],
            ports=ports,
            resources=_resources(router.resources),
            probes=_router_probes("/liveness", "/readiness"),
            volume_mounts=[{"name": "tmp", "mountPath": "/tmp"}],
            security_context={
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            },
        )
    # Only vllm-router's Kubernetes discovery calls the API; every other router gets no identity and no token.
    discovers = custom is None and protocol != "moriio"
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
    # Headless: engines (MoRI-IO registration) and Prometheus reach each router pod by name, and no Service
    # address is spent; the user-facing Service `<name>` is the one with a cluster IP.
    service = ServicePlan(name, labels, selector_labels(deployment.name, "router"), service_ports, headless=True)
    rules = [{key: list(value) for key, value in rule.items()} for rule in ROUTER_ROLE_RULES]
    rbac = RbacPlan(name, labels, rules) if discovers else None
    return RouterPlan(workload, service, rbac, argv)


DEFAULT_ROUTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}


def _resources(given: ResourceRequirements) -> dict[str, dict[str, str]]:
    return container_resources(given, DEFAULT_ROUTER_RESOURCES)


def _router_probes(liveness: str, readiness: str) -> dict[str, Any]:
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


def user_facing_service(deployment: str, service: ServiceSpec, decode: ResolvedPool, has_router: bool) -> ServicePlan:
    """The Service `<name>`: the router when there is one, else the decode pool's API pods directly."""
    if has_router:
        selector = selector_labels(deployment, "router")
        labels = common_labels(deployment, "router")
    else:
        selector = dict(decode.api_selector)
        labels = common_labels(deployment, "decode")
    return ServicePlan(
        deployment,
        {**service.labels, **labels},
        selector,
        [{"name": "http", "port": service.port, "targetPort": "http", "protocol": "TCP"}],
        annotations=dict(service.annotations),
        type=service.type,
    )
