"""One engine pool: its workload (Deployment or LeaderWorkerSet), its Service and its vLLM command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import ReplicaLayout, ResolvedDeployment, ResolvedPool, effective_rollout
from disagg.frontend.contract import engine_annotations, pairing_labels
from disagg.names import LWS_WORKER_INDEX_ENV, SERVING_GATE, child_name, common_labels, pool_service_name

from .connectors import PoolConnectors, pool_connectors
from .connectors.base import PoolContext
from .engine_args import WORKER_INDEX, NodeRole, engine_argv
from .model import ContainerPlan, EngineCommand, PodPlan, ServicePlan, WorkloadPlan
from .pairing import Pairing
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
from .serving import PRE_STOP_SECONDS, pre_stop, shutdown_timeout

GROUP_STARTUP_POLICY = "LeaderCreated"
"""Workers start as soon as the leader pod exists, not once it is Ready: a multi-node vLLM leader only becomes
ready after every worker has joined, so waiting for it (LeaderReady) would never start the workers."""
GROUP_RESTART_POLICY = "RecreateGroupOnPodRestart"
"""A replica's ranks share one torch.distributed group that cannot take back a restarted rank, so one failing pod
restarts its whole group."""


@dataclass(frozen=True)
class PoolPlan:
    workload: WorkloadPlan
    service: ServicePlan
    command: EngineCommand | None
    connectors: PoolConnectors | None


def engine_contract(
    pool: ResolvedPool, pairing: Pairing, http: int = ENGINE_HTTP_PORT
) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations the frontend reads from an engine pod (frontend/contract.py); the connector
    wirings add theirs (NIXL side channel, MoRI-IO ports, Mooncake bootstrap port)."""
    spec = pool.spec
    annotations = engine_annotations(
        generation=pairing.generation,
        http_port=http,
        tp_size=spec.tensor_parallel,
        pp_size=spec.pipeline_parallel,
        dp_size=spec.data_parallel,
    )
    return pairing_labels(pairing.revision), annotations


def plan_pool(deployment: ResolvedDeployment, pool: ResolvedPool, pairing: Pairing, gated: bool = False) -> PoolPlan:
    """`gated`: the pods carry the serving readiness gate and roll with GATED_ROLLOUT defaults (api/resolve.py)."""
    if pool.custom is not None:
        return _custom_pool(deployment, pool, pairing, gated)
    context = PoolContext(
        deployment.name,
        pool,
        deployment.transfer,
        deployment.kv_cache,
        deployment.mooncake_store,
        deployment.lmcache,
        deployment.router,
        deployment.pegaflow,
    )
    connectors = pool_connectors(context)
    drain_setting = pool.engine.shutdown_timeout_seconds
    node_roles: list[NodeRole] = ["leader", "worker"] if pool.layout.multi_node else ["single"]
    argvs = {
        node_role: engine_argv(
            deployment, pool, connectors.kv_transfer_config, node_role, shutdown_timeout(drain_setting, gated)
        )
        for node_role in node_roles
    }
    pods = {
        node_role: _engine_pod(deployment, pool, connectors, argvs[node_role], node_role, pairing, gated)
        for node_role in node_roles
    }
    api_pod = pods[node_roles[0]]
    command = EngineCommand(
        role=pool.role,
        argv=argvs[node_roles[0]],
        worker_argv=_worker_argv_for_index(argvs["worker"], pool.layout, 1) if "worker" in argvs else None,
        kv_transfer_config=connectors.kv_transfer_config,
        env=_literal_env(api_pod.containers[0].env),
    )
    workload = _workload(deployment.name, pool, api_pod, pods.get("worker"), gated)
    return PoolPlan(workload, _pool_service(deployment.name, pool, []), command, connectors)


def _engine_pod(
    deployment: ResolvedDeployment,
    pool: ResolvedPool,
    connectors: PoolConnectors,
    argv: list[str],
    node_role: NodeRole,
    pairing: Pairing,
    gated: bool,
) -> PodPlan:
    volumes, mounts = engine_volumes(deployment, pool, bool(connectors.config_files))
    contract_labels, contract_annotations = engine_contract(pool, pairing)
    ports = ([http_port()] if node_role != "worker" else []) + connectors.ports
    network = deployment.transfer.network
    container = ContainerPlan(
        name="vllm",
        image=pool.image,
        image_pull_policy=pool.image_pull_policy,
        command=_start_command(pool, node_role),
        args=argv,
        env=[*base_engine_env(deployment, deployment.family), *connectors.env, *user_env(pool.engine.env)],
        ports=ports,
        resources=engine_resources(pool, network),
        volume_mounts=mounts,
        probes=http_probes(pool.engine) if node_role != "worker" else {},
        security_context={"capabilities": {"add": ["IPC_LOCK"]}} if network.ipc_lock else None,
        lifecycle=pre_stop(gated and node_role != "worker"),
    )
    return PodPlan(
        labels={**pool.spec.pod_labels, **common_labels(deployment.name, pool.role), **contract_labels},
        annotations={**pool.spec.pod_annotations, **contract_annotations, **connectors.annotations},
        containers=[container],
        volumes=volumes,
        spec_extra=_pod_extra(deployment, pool, gated and node_role != "worker", host_ipc=connectors.host_ipc),
    )


def _start_command(pool: ResolvedPool, node_role: NodeRole) -> list[str]:
    """`vllm serve`, wrapped in a shell only when something must happen first (ulimit) or be computed from the
    pod's position (a data-parallel worker's start rank is its LeaderWorkerSet index times ranks per node)."""
    steps = []
    if pool.engine.nofile_limit is not None:
        steps.append(f"ulimit -n {pool.engine.nofile_limit}")
    serve = 'exec vllm serve "$@"'
    if node_role == "worker" and pool.layout.kind == "data-parallel":
        serve += f" --data-parallel-start-rank $(({LWS_WORKER_INDEX_ENV} * {pool.layout.ranks_per_pod}))"
    if not steps and serve == 'exec vllm serve "$@"':
        return ["vllm", "serve"]
    return ["/bin/sh", "-c", " && ".join([*steps, serve]), "vllm-serve"]


def _worker_argv_for_index(argv: list[str], layout: ReplicaLayout, index: int) -> list[str]:
    """What worker `index` actually runs, with the LeaderWorkerSet placeholders resolved (for review and tests)."""
    resolved = [str(index) if arg == WORKER_INDEX else arg for arg in argv]
    if layout.kind == "data-parallel":
        resolved += ["--data-parallel-start-rank", str(index * layout.ranks_per_pod)]
    return resolved


def _pod_extra(
    deployment: ResolvedDeployment, pool: ResolvedPool, gated: bool, host_ipc: bool = False
) -> dict[str, Any]:
    spec = pool.spec
    extra: dict[str, Any] = {}
    if gated:
        extra["readinessGates"] = [{"conditionType": SERVING_GATE}]
    if host_ipc:
        extra["hostIPC"] = True
    if spec.service_account_name:
        extra["serviceAccountName"] = spec.service_account_name
    extra["automountServiceAccountToken"] = False  # engines never call the Kubernetes API (D77)
    drain = shutdown_timeout(pool.engine.shutdown_timeout_seconds, gated)
    extra["terminationGracePeriodSeconds"] = grace_period(pool, drain, PRE_STOP_SECONDS if gated else 0)
    if deployment.transfer.network.host_network:
        extra["hostNetwork"] = True
        extra["dnsPolicy"] = "ClusterFirstWithHostNet"
    scheduling = scheduling_fields(spec.scheduling)
    if spec.scheduling.replica_topology_key is not None:  # validation allows it on multi-node pools only
        scheduling = with_replica_affinity(scheduling, pool.selector, spec.scheduling.replica_topology_key)
    extra.update(scheduling)
    if spec.resources.claims:
        extra["resourceClaims"] = resource_claims(spec)
    return extra


def _workload(deployment: str, pool: ResolvedPool, pod: PodPlan, worker: PodPlan | None, gated: bool) -> WorkloadPlan:
    surge, unavailable = effective_rollout(pool.spec, pool.role, gated)
    limits = {"maxSurge": surge, "maxUnavailable": unavailable}
    multi_node = pool.layout.multi_node
    # Deployment and LeaderWorkerSet spell the same rolling-update limits under different keys.
    strategy = {"type": "RollingUpdate", "rollingUpdateConfiguration" if multi_node else "rollingUpdate": limits}
    return WorkloadPlan(
        "LeaderWorkerSet" if multi_node else "Deployment",
        child_name(deployment, pool.role),
        pool.role,
        common_labels(deployment, pool.role),
        dict(pool.selector),
        pool.spec.replicas,
        pod,
        strategy,
        group_size=pool.layout.pods,
        worker_pod=worker if multi_node else None,
        startup_policy=GROUP_STARTUP_POLICY if multi_node else None,
        group_restart_policy=GROUP_RESTART_POLICY if multi_node else None,
        replicas_owned_elsewhere=pool.replicas_owned_elsewhere,
    )


def _pool_service(
    deployment: str, pool: ResolvedPool, extra_ports: list[dict[str, Any]], port: int = ENGINE_HTTP_PORT
) -> ServicePlan:
    """A headless Service in front of the pool's API pods (leaders only for multi-node replicas)."""
    ports = [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}]
    ports += [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"} for p in extra_ports
    ]
    return ServicePlan(
        pool_service_name(deployment, pool.role),
        common_labels(deployment, pool.role),
        dict(pool.api_selector),
        ports,
        headless=True,
    )


def _custom_pool(deployment: ResolvedDeployment, pool: ResolvedPool, pairing: Pairing, gated: bool) -> PoolPlan:
    """A non-vLLM engine (e.g. a TileRT decode server): its own image and command, our labels, GPUs and probes."""
    custom = pool.custom
    assert custom is not None
    volumes, mounts = engine_volumes(deployment, pool, has_kv_files=False)
    extra_ports = [
        {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in sorted(custom.extra_ports.items())
    ]
    network = deployment.transfer.network
    container = ContainerPlan(
        name="engine",
        image=custom.image,
        image_pull_policy=pool.image_pull_policy,
        command=list(custom.command),
        args=list(custom.args),
        env=[*base_engine_env(deployment, "dense"), *user_env(custom.env)],
        ports=[{"name": "http", "containerPort": custom.port, "protocol": "TCP"}, *extra_ports],
        resources=engine_resources(pool, network),
        volume_mounts=mounts,
        probes=http_probes(pool.engine, custom.health_path),
        security_context={"capabilities": {"add": ["IPC_LOCK"]}} if network.ipc_lock else None,
        lifecycle=pre_stop(gated),
    )
    contract_labels, contract_annotations = engine_contract(pool, pairing, custom.port)
    pod = PodPlan(
        labels={
            **pool.spec.pod_labels,
            **common_labels(deployment.name, pool.role, app_name="custom-engine"),
            **contract_labels,
        },
        annotations={**pool.spec.pod_annotations, **contract_annotations},
        containers=[container],
        volumes=volumes,
        spec_extra=_pod_extra(deployment, pool, gated),
    )
    workload = _workload(deployment.name, pool, pod, None, gated)
    service = _pool_service(deployment.name, pool, extra_ports, port=custom.port)
    return PoolPlan(workload, service, None, None)


def _literal_env(env: list[dict[str, Any]]) -> dict[str, str]:
    return {var["name"]: var["value"] if "value" in var else f"$({var['name']})" for var in env}
