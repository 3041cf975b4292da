"""spec -> resolved view -> plan: the one entry point of the plan stage."""

from __future__ import annotations

from typing import Any

from disagg.api.deployment import DisaggDeployment
from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import resolve_deployment
from disagg.names import API_VERSION, KIND, common_labels, kv_config_name

from .model import DEFAULT_INSTALLATION, ConfigMapPlan, DeploymentPlan, Installation, ServicePlan, WorkloadPlan
from .pairing import plan_pairing
from .pool import plan_pool
from .render_tier import plan_render_tier
from .router import plan_router, user_facing_service
from .serving import gates_pools, plan_serving
from .stores import plan_node_daemon, plan_store, store_placement


def owner_references(deployment: DisaggDeployment) -> list[dict[str, Any]]:
    """The controller owner reference of every child: the garbage collector deletes children with their
    DisaggDeployment, and pruning deletes only objects that carry it."""
    uid = deployment.metadata.uid
    if uid is None:
        return []
    reference = {"apiVersion": API_VERSION, "kind": KIND, "name": deployment.metadata.name, "uid": uid}
    return [{**reference, "controller": True, "blockOwnerDeletion": True}]


def build_plan(
    deployment: DisaggDeployment, namespace: str | None = None, installation: Installation = DEFAULT_INSTALLATION
) -> DeploymentPlan:
    """Everything the cluster needs for one DisaggDeployment. Deterministic: equal input, equal plan.
    `installation.serving_check`: the serving check's mode where the spec leaves it unset."""
    resolved = resolve_deployment(deployment, namespace)
    name, namespace = resolved.name, resolved.namespace
    pairing = plan_pairing(resolved, deployment.metadata.generation, deployment.status)
    gated = gates_pools(resolved, installation.serving_check)
    pools = [plan_pool(resolved, pool, pairing, gated=gated and not pool.layout.multi_node) for pool in resolved.pools]
    router = plan_router(resolved, installation)
    router_workload = router.workload if router is not None else None
    render_tier = plan_render_tier(resolved)
    store = plan_store(
        name,
        resolved.mooncake_store,
        resolved.lmcache,
        resolved.shared_image,
        resolved.pegaflow,
        store_placement(resolved),
    )
    node_daemon = plan_node_daemon(resolved)

    workloads: list[WorkloadPlan] = []
    services: list[ServicePlan] = []
    if store is not None:
        workloads.append(store.workload)
        services.append(store.service)
    if node_daemon is not None:
        workloads.append(node_daemon)
    for pool in pools:
        workloads.append(pool.workload)
        services.append(pool.service)
    if router is not None:
        workloads.append(router.workload)
        services.append(router.service)
    if render_tier is not None:
        workloads.append(render_tier.workload)
        services.append(render_tier.service)
    frontend = resolved.frontend
    services.append(user_facing_service(resolved, frontend.service, has_router=router is not None))

    files: dict[str, str] = dict(store.config_files) if store is not None else {}
    for pool in pools:
        if pool.connectors is not None:
            files.update(pool.connectors.config_files)
    config_maps = [ConfigMapPlan(kv_config_name(name), common_labels(name, "kv-store"), dict(sorted(files.items())))]
    endpoint_host = f"{name}.{namespace}.svc" if namespace else name
    return DeploymentPlan(
        name=name,
        namespace=namespace,
        owner_references=owner_references(deployment),
        family=resolved.family,
        endpoint=f"http://{endpoint_host}:{frontend.service.port}",
        workloads=workloads,
        services=services,
        config_maps=config_maps if files else [],
        rbac=router.rbac if router is not None else None,
        engines=[pool.command for pool in pools if pool.command is not None],
        router=resolved.router,
        router_argv=router.argv if router is not None else None,
        frontend_argv=router.frontend_argv if router is not None else None,
        render_tier_argv=render_tier.argv if render_tier is not None else None,
        pairing=pairing,
        serving=plan_serving(
            resolved,
            router_workload,
            resolved.decode.custom.port if resolved.decode.custom else ENGINE_HTTP_PORT,
            installation.serving_check,
        ),
        pod_memory={pool.role: pool.memory for pool in resolved.pools},
    )
