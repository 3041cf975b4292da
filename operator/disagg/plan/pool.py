"""One engine pool: its workload (Deployment or LeaderWorkerSet), its Service and its vLLM command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.engine import DEFAULT_ENGINE_IMAGE, EngineSettings
from disagg.api.pool import CustomContainer, PoolName, PoolSpec
from disagg.api.resolve import ResolvedFamily, effective_engine, gpus_per_pod, pool_of
from disagg.api.types import IntOrPercent
from disagg.names import LWS_WORKER_INDEX_LABEL, child_name, common_labels, pool_service_name, selector_labels

from .connectors import PoolConnectors, pool_connectors
from .connectors.base import PoolContext
from .engine_args import WORKER_INDEX, MultiNode, NodeRole, engine_argv, multi_node_layout
from .model import ContainerPlan, EngineCommand, PodPlan, ServicePlan, WorkloadPlan
from .pod import (
    base_engine_env,
    engine_resources,
    engine_volumes,
    grace_period,
    http_port,
    http_probes,
    resource_claims,
    scheduling_fields,
    user_env,
    with_replica_affinity,
)

# Prefill may lose one replica at a time during an update; decode surges first so its last replica never goes.
DEFAULT_ROLLOUT: dict[PoolName, tuple[IntOrPercent, IntOrPercent]] = {"prefill": (0, 1), "decode": (1, 0)}


@dataclass(frozen=True)
class PoolPlan:
    workload: WorkloadPlan
    service: ServicePlan
    command: EngineCommand | None
    connectors: PoolConnectors | None


def plan_pool(spec: DisaggDeploymentSpec, deployment: str, role: PoolName, family: ResolvedFamily) -> PoolPlan:
    pool = pool_of(spec, role)
    if pool.custom_container is not None:
        return _custom_pool(spec, deployment, role, pool, pool.custom_container)
    engine = effective_engine(spec, role)
    layout = multi_node_layout(pool)
    context = PoolContext(deployment, role, spec, pool, ranks_per_pod=layout.ranks_per_node)
    connectors = pool_connectors(context)
    tokens_only = spec.frontend.render.enabled
    node_roles: list[NodeRole] = ["single"] if layout.layout == "single" else ["leader", "worker"]
    argvs = {
        node_role: engine_argv(spec, pool, engine, family, connectors.kv_transfer_config, node_role, tokens_only)
        for node_role in node_roles
    }
    pods = {
        node_role: _engine_pod(
            spec, deployment, role, pool, engine, family, connectors, argvs[node_role], node_role, layout
        )
        for node_role in node_roles
    }
    api_argv = argvs["single"] if layout.layout == "single" else argvs["leader"]
    command = EngineCommand(
        role=role,
        argv=api_argv,
        worker_argv=_worker_argv_for_index(argvs["worker"], layout, 1) if "worker" in argvs else None,
        kv_transfer_config=connectors.kv_transfer_config,
        env=_literal_env(pods[node_roles[0]].containers[0].env),
    )
    workload = _workload(deployment, role, pool, pods[node_roles[0]], pods.get("worker"), layout)
    return PoolPlan(workload, _pool_service(deployment, role, layout, []), command, connectors)


def _engine_pod(
    spec: DisaggDeploymentSpec,
    deployment: str,
    role: PoolName,
    pool: PoolSpec,
    engine: EngineSettings,
    family: ResolvedFamily,
    connectors: PoolConnectors,
    argv: list[str],
    node_role: NodeRole,
    layout: MultiNode,
) -> PodPlan:
    volumes, mounts = engine_volumes(spec, deployment, pool, role, bool(connectors.config_files))
    ports = ([http_port()] if node_role != "worker" else []) + connectors.ports
    pinned = connectors.host_memory_per_engine * layout.ranks_per_node
    container = ContainerPlan(
        name="vllm",
        image=engine.image or DEFAULT_ENGINE_IMAGE,
        image_pull_policy=engine.image_pull_policy or "IfNotPresent",
        command=_start_command(engine, node_role, layout),
        args=argv,
        env=[*base_engine_env(spec, deployment, family), *connectors.env, *user_env(engine.env)],
        ports=ports,
        resources=engine_resources(spec, pool, gpus_per_pod(pool), pinned),
        volume_mounts=mounts,
        probes=http_probes(engine) if node_role != "worker" else {},
        security_context={"capabilities": {"add": ["IPC_LOCK"]}} if spec.transfer.network.ipc_lock else None,
    )
    return PodPlan(
        labels={**pool.pod_labels, **common_labels(deployment, role)},
        annotations={**pool.pod_annotations, **connectors.annotations},
        containers=[container],
        volumes=volumes,
        spec_extra=_pod_extra(spec, deployment, role, pool, engine),
    )


def _start_command(engine: EngineSettings, node_role: NodeRole, layout: MultiNode) -> list[str]:
    """`vllm serve`, wrapped in a shell only when something must happen first (ulimit) or be computed from the
    pod's position (a data-parallel worker's start rank is its LeaderWorkerSet index times ranks per node)."""
    steps = []
    if engine.nofile_limit is not None:
        steps.append(f"ulimit -n {engine.nofile_limit}")
    serve = 'exec vllm serve "$@"'
    if node_role == "worker" and layout.layout == "data-parallel":
        serve += f" --data-parallel-start-rank $((LWS_WORKER_INDEX * {layout.ranks_per_node}))"
    if not steps and serve == 'exec vllm serve "$@"':
        return ["vllm", "serve"]
    return ["/bin/sh", "-c", " && ".join([*steps, serve]), "vllm-serve"]


def _worker_argv_for_index(argv: list[str], layout: MultiNode, index: int) -> list[str]:
    """What worker `index` actually runs, with the LeaderWorkerSet placeholders resolved (for review and tests)."""
    resolved = [str(index) if arg == WORKER_INDEX else arg for arg in argv]
    if layout.layout == "data-parallel":
        resolved += ["--data-parallel-start-rank", str(index * layout.ranks_per_node)]
    return resolved


def _pod_extra(
    spec: DisaggDeploymentSpec, deployment: str, role: PoolName, pool: PoolSpec, engine: EngineSettings
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if pool.service_account_name:
        extra["serviceAccountName"] = pool.service_account_name
    extra["terminationGracePeriodSeconds"] = grace_period(pool, engine)
    if spec.transfer.network.host_network:
        extra["hostNetwork"] = True
        extra["dnsPolicy"] = "ClusterFirstWithHostNet"
    scheduling = scheduling_fields(pool.scheduling)
    if pool.scheduling.replica_topology_key is not None:  # validation allows it on multi-node pools only
        scheduling = with_replica_affinity(
            scheduling, selector_labels(deployment, role), pool.scheduling.replica_topology_key
        )
    extra.update(scheduling)
    if pool.resources.claims:
        extra["resourceClaims"] = resource_claims(pool)
    return extra


def _workload(
    deployment: str, role: PoolName, pool: PoolSpec, pod: PodPlan, worker: PodPlan | None, layout: MultiNode
) -> WorkloadPlan:
    surge, unavailable = DEFAULT_ROLLOUT[role]
    if pool.rollout.max_surge is not None:
        surge = pool.rollout.max_surge
    if pool.rollout.max_unavailable is not None:
        unavailable = pool.rollout.max_unavailable
    limits = {"maxSurge": surge, "maxUnavailable": unavailable}
    single = layout.layout == "single"
    # Deployment and LeaderWorkerSet spell the same rolling-update limits under different keys.
    strategy = {"type": "RollingUpdate", "rollingUpdate" if single else "rollingUpdateConfiguration": limits}
    return WorkloadPlan(
        "Deployment" if single else "LeaderWorkerSet",
        child_name(deployment, role),
        role,
        common_labels(deployment, role),
        selector_labels(deployment, role),
        pool.replicas,
        pod,
        strategy,
        group_size=1 if single else layout.nodes,
        worker_pod=None if single else worker,
        replicas_owned_elsewhere=pool.autoscaling.enabled,
    )


def _pool_service(
    deployment: str, role: PoolName, layout: MultiNode, extra_ports: list[dict[str, Any]], port: int | None = None
) -> ServicePlan:
    """A headless Service in front of the pool's API pods (leaders only for multi-node replicas)."""
    selector = selector_labels(deployment, role)
    if layout.layout != "single":
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    ports = [{"name": "http", "port": port or 8000, "targetPort": "http", "protocol": "TCP"}]
    ports += [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"} for p in extra_ports
    ]
    return ServicePlan(
        pool_service_name(deployment, role), common_labels(deployment, role), selector, ports, headless=True
    )


def _custom_pool(
    spec: DisaggDeploymentSpec, deployment: str, role: PoolName, pool: PoolSpec, custom: CustomContainer
) -> PoolPlan:
    """A non-vLLM engine (e.g. a TileRT decode server): its own image and command, our labels, GPUs and probes."""
    engine = effective_engine(spec, role)
    volumes, mounts = engine_volumes(spec, deployment, pool, role, has_kv_files=False)
    extra_ports = [
        {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in sorted(custom.extra_ports.items())
    ]
    container = ContainerPlan(
        name="engine",
        image=custom.image,
        image_pull_policy=engine.image_pull_policy or "IfNotPresent",
        command=list(custom.command),
        args=list(custom.args),
        env=[*base_engine_env(spec, deployment, "dense"), *user_env(custom.env)],
        ports=[{"name": "http", "containerPort": custom.port, "protocol": "TCP"}, *extra_ports],
        resources=engine_resources(spec, pool, gpus_per_pod(pool), 0),
        volume_mounts=mounts,
        probes=http_probes(engine, custom.health_path),
        security_context={"capabilities": {"add": ["IPC_LOCK"]}} if spec.transfer.network.ipc_lock else None,
    )
    pod = PodPlan(
        labels={**pool.pod_labels, **common_labels(deployment, role, app_name="custom-engine")},
        annotations=dict(pool.pod_annotations),
        containers=[container],
        volumes=volumes,
        spec_extra=_pod_extra(spec, deployment, role, pool, engine),
    )
    workload = _workload(deployment, role, pool, pod, None, MultiNode("single", 1, 1))
    service = _pool_service(deployment, role, MultiNode("single", 1, 1), extra_ports, port=custom.port)
    return PoolPlan(workload, service, None, None)


def _literal_env(env: list[dict[str, Any]]) -> dict[str, str]:
    return {var["name"]: var["value"] if "value" in var else f"$({var['name']})" for var in env}
