"""Pod-level pieces shared by every engine pod: environment, volumes, resources, probes, scheduling."""

from __future__ import annotations

from typing import Any

from disagg.api.engine import EngineSettings
from disagg.api.frontend import ResourceRequirements
from disagg.api.kvcache import DiskTier
from disagg.api.model import ModelStorage
from disagg.api.owned import ENGINE_HTTP_PORT, HUGEPAGES_PATH, SHM_PATH
from disagg.api.pool import PoolSpec, Scheduling
from disagg.api.resolve import ResolvedDeployment, ResolvedFamily, ResolvedPool
from disagg.api.transfer import NetworkSettings
from disagg.api.types import EnvVar, Toleration
from disagg.api.units import format_binary_quantity
from disagg.names import LWS_GROUP_KEY_LABEL, POOL_HOST_ENV, POOLS, kv_config_name, pool_service_name

from .connectors.base import KV_CONFIG_DIR, POD_NAME_ENV, field_env, literal_env

DEFAULT_STARTUP_TIMEOUT_SECONDS = 1800
PROBE_PERIOD_SECONDS = 10
GRACE_MARGIN_SECONDS = 30
"""Time beyond vLLM's own shutdown timeout for the process to exit after draining."""


def base_engine_env(deployment: ResolvedDeployment, presets: ResolvedFamily) -> list[dict[str, Any]]:
    """Variables every engine container gets, before connector and user variables. `presets` is the family whose
    presets apply (a custom engine gets none)."""
    env = [
        field_env(POD_NAME_ENV, "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        # vLLM binds and advertises this address for its distributed and KV side channels.
        field_env("VLLM_HOST_IP", "status.podIP"),
        literal_env("PYTHONHASHSEED", str(deployment.python_hash_seed)),
        *model_env(deployment.model.storage),
        *pool_host_env(deployment.name),
    ]
    if presets == "hybrid-ssm":
        env.append(literal_env("VLLM_SSM_CONV_STATE_LAYOUT", "DS"))
    network = deployment.transfer.network
    for name, value in (
        ("UCX_TLS", network.ucx_tls),
        ("UCX_NET_DEVICES", network.ucx_net_devices),
        ("FI_PROVIDER", network.fi_provider),
    ):
        if value is not None:
            env.append(literal_env(name, value))
    return env


def pool_host_env(deployment: str) -> list[dict[str, Any]]:
    """The pools' Service names, for custom connectors' and routers' $(DISAGG_DECODE_HOST)-style arguments."""
    return [literal_env(POOL_HOST_ENV[role], pool_service_name(deployment, role)) for role in POOLS]


def model_env(storage: ModelStorage) -> list[dict[str, Any]]:
    env = [literal_env("HF_HOME", storage.mount_path)]
    if storage.offline:
        env.append(literal_env("HF_HUB_OFFLINE", "1"))
    token = storage.hugging_face.token_secret_ref if storage.hugging_face else None
    if token is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    return env


def user_env(env: list[EnvVar]) -> list[dict[str, Any]]:
    return [var.model_dump(by_alias=True, exclude_none=True) for var in env]


def model_volume(storage: ModelStorage) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model volume and its mount: read-only for shared weights, a writable cache for downloads."""
    if storage.persistent_volume_claim is not None:
        volume = {
            "name": "model",
            "persistentVolumeClaim": {"claimName": storage.persistent_volume_claim.claim_name, "readOnly": True},
        }
        mount = {"name": "model", "mountPath": storage.mount_path, "readOnly": True}
        if storage.persistent_volume_claim.sub_path:
            mount["subPath"] = storage.persistent_volume_claim.sub_path
        return volume, mount
    if storage.host_path is not None:
        volume = {"name": "model", "hostPath": {"path": storage.host_path.path, "type": "Directory"}}
        return volume, {"name": "model", "mountPath": storage.mount_path, "readOnly": True}
    cache: dict[str, Any] = {}
    if storage.hugging_face is not None and storage.hugging_face.cache_size is not None:
        cache["sizeLimit"] = str(storage.hugging_face.cache_size)
    return {"name": "model", "emptyDir": cache}, {"name": "model", "mountPath": storage.mount_path}


def engine_volumes(
    deployment: ResolvedDeployment, pool: ResolvedPool, has_kv_files: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and mounts of an engine container."""
    model, model_mount = model_volume(deployment.model.storage)
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(pool.spec.resources.shm_size)}},
        model,
    ]
    mounts = [{"name": "dshm", "mountPath": SHM_PATH}, model_mount]
    if has_kv_files:
        volumes.append({"name": "kv-config", "configMap": {"name": kv_config_name(deployment.name)}})
        mounts.append({"name": "kv-config", "mountPath": KV_CONFIG_DIR, "readOnly": True})
    disk = deployment.kv_cache.disk
    if disk is not None and pool.role in disk.pools:
        volumes.append(disk_volume(disk))
        mounts.append({"name": "kv-disk", "mountPath": disk.mount_path})
    hugepages = deployment.transfer.network.hugepages
    if hugepages is not None:
        volumes.append({"name": "hugepages", "emptyDir": {"medium": f"HugePages-{hugepages.page_size}"}})
        mounts.append({"name": "hugepages", "mountPath": HUGEPAGES_PATH})
    return volumes, mounts


def disk_volume(disk: DiskTier) -> dict[str, Any]:
    source = disk.volume
    if source.persistent_volume_claim is not None:
        return {"name": "kv-disk", "persistentVolumeClaim": {"claimName": source.persistent_volume_claim.claim_name}}
    if source.host_path is not None:
        return {"name": "kv-disk", "hostPath": {"path": source.host_path.path, "type": "DirectoryOrCreate"}}
    limit = source.empty_dir.size_limit if source.empty_dir else None
    return {"name": "kv-disk", "emptyDir": {"sizeLimit": str(limit)} if limit is not None else {}}


def engine_resources(pool: ResolvedPool, network: NetworkSettings) -> dict[str, Any]:
    """Requests and limits of one engine pod. Memory is the pool's PodMemory: host memory pinned by KV tiers is
    added on top of the user's memory; without a user value it becomes the request, so the scheduler still reserves
    room for it."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    resources = pool.spec.resources
    gpus = pool.gpus_per_pod
    if resources.cpu is not None:
        requests["cpu"] = str(resources.cpu)
    if pool.memory.request is not None:
        requests["memory"] = format_binary_quantity(pool.memory.request)
    if pool.memory.limit is not None:
        limits["memory"] = format_binary_quantity(pool.memory.limit)
    if gpus:
        requests[resources.gpu_resource_name] = limits[resources.gpu_resource_name] = str(gpus)
    if network.rdma is not None:
        requests[network.rdma.resource_name] = limits[network.rdma.resource_name] = str(network.rdma.count)
    if network.hugepages is not None:
        name = f"hugepages-{network.hugepages.page_size}"
        requests[name] = limits[name] = str(network.hugepages.size)
    for name, amount in resources.extra.items():
        requests[name] = limits[name] = str(amount)
    container_resources: dict[str, Any] = {"requests": requests, "limits": limits}
    if resources.claims:
        container_resources["claims"] = [{"name": claim.name} for claim in resources.claims]
    return container_resources


def container_resources(given: ResourceRequirements, default: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The user's requests and limits exactly as written, or the defaults when neither is given. Mixing them made
    invalid pods (requests of 2Gi under the default 1Gi limit)."""
    if not given.requests and not given.limits:
        return {key: dict(value) for key, value in default.items()}
    return {
        "requests": {name: str(value) for name, value in given.requests.items()},
        "limits": {name: str(value) for name, value in given.limits.items()},
    }


def resource_claims(pool: PoolSpec) -> list[dict[str, str]]:
    """The pod's resourceClaims: each names a template (a claim per pod) or an existing claim (shared)."""
    claims = []
    for claim in pool.resources.claims:
        if claim.resource_claim_template_name is not None:
            claims.append({"name": claim.name, "resourceClaimTemplateName": claim.resource_claim_template_name})
        elif claim.resource_claim_name is not None:
            claims.append({"name": claim.name, "resourceClaimName": claim.resource_claim_name})
    return claims


def http_probes(engine: EngineSettings, path: str = "/health", port: str | int = "http") -> dict[str, Any]:
    """Probes for processes that load for minutes: a long startup probe, then liveness and readiness."""
    startup = engine.startup_timeout_seconds or DEFAULT_STARTUP_TIMEOUT_SECONDS
    get = {"path": path, "port": port}
    return {
        "startupProbe": {
            "httpGet": get,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "failureThreshold": max(1, startup // PROBE_PERIOD_SECONDS),
            "timeoutSeconds": 5,
        },
        "livenessProbe": {
            "httpGet": get,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "failureThreshold": 3,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {"httpGet": get, "periodSeconds": 5, "failureThreshold": 2, "timeoutSeconds": 5},
    }


def http_port() -> dict[str, Any]:
    return {"name": "http", "containerPort": ENGINE_HTTP_PORT, "protocol": "TCP"}


def grace_period(pool: ResolvedPool, shutdown_timeout: int | None, pre_stop_seconds: int = 0) -> int:
    """The pool's own setting, else the engine's drain after its pre-stop wait, plus a margin."""
    if pool.spec.termination_grace_period_seconds is not None:
        return pool.spec.termination_grace_period_seconds
    return pre_stop_seconds + (shutdown_timeout or 0) + GRACE_MARGIN_SECONDS


def scheduling_fields(scheduling: Scheduling) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if scheduling.node_selector:
        fields["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        fields["tolerations"] = tolerations(scheduling.tolerations)
    if scheduling.affinity is not None:
        fields["affinity"] = scheduling.affinity.model_dump(by_alias=True, exclude_defaults=True)
    if scheduling.topology_spread_constraints:
        fields["topologySpreadConstraints"] = [
            constraint.model_dump(by_alias=True, exclude_defaults=True)
            for constraint in scheduling.topology_spread_constraints
        ]
    if scheduling.priority_class_name:
        fields["priorityClassName"] = scheduling.priority_class_name
    if scheduling.scheduler_name:
        fields["schedulerName"] = scheduling.scheduler_name
    if scheduling.runtime_class_name:
        fields["runtimeClassName"] = scheduling.runtime_class_name
    return fields


def with_replica_affinity(fields: dict[str, Any], selector: dict[str, str], topology_key: str) -> dict[str, Any]:
    """Add a required podAffinity that keeps the pods of one LeaderWorkerSet group on nodes sharing `topology_key`.

    matchLabelKeys (GA in Kubernetes 1.33) narrows the selector to the pod's own group-key label, which
    LeaderWorkerSet sets per group; the first pod of a group may go anywhere because it matches its own term.
    The user's own affinity is kept, with this term appended."""
    term = {
        "labelSelector": {"matchLabels": dict(selector)},
        "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
        "topologyKey": topology_key,
    }
    affinity = dict(fields.get("affinity") or {})
    pod_affinity = dict(affinity.get("podAffinity") or {})
    required = list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = [*required, term]
    affinity["podAffinity"] = pod_affinity
    return {**fields, "affinity": affinity}


def tolerations(items: list[Toleration]) -> list[dict[str, Any]]:
    return [item.model_dump(by_alias=True, exclude_none=True) for item in items]


RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}
"""The securityContext of the operator's own small containers (routers, daemons): what Pod Security's
restricted level asks for."""


DEFAULT_ROUTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}


def router_resources(given: ResourceRequirements) -> dict[str, dict[str, str]]:
    """Every router's (the frontend's, vllm-router's, a custom one's): as written, or the defaults, never a mix."""
    return container_resources(given, DEFAULT_ROUTER_RESOURCES)
