"""Derived facts every later stage agrees on, each decided here once.

The small functions (a pool's effective engine settings, its layout over nodes, its GPUs, the connector settings
with their defaults, the model family) are total over any parsed spec, so the validation rules use them too.
`resolve_deployment` builds the whole view of a validated DisaggDeployment once; the planners take that view,
never the spec, so no planner derives a fact again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from disagg.frontend.contract import FlowName
from disagg.names import FRONTEND_ADMIN_PORT, POOLS, PoolName, api_pod_selector, selector_labels

from .deployment import DisaggDeployment, DisaggDeploymentSpec
from .engine import DEFAULT_ENGINE_IMAGE, ChatSettings, EngineSettings
from .frontend import FrontendSpec
from .kvcache import KvCacheSpec, MooncakeStore, PegaflowStore
from .model import ModelSpec
from .pool import CustomContainer, PoolSpec
from .serving import CheckMode, ServingSpec
from .transfer import (
    ConnectorKind,
    CustomConnectorSettings,
    LmcacheSettings,
    MooncakeSettings,
    MoriioSettings,
    NetworkSettings,
    NixlSettings,
    TransferSpec,
)
from .types import EnvVar, IntOrPercent, Quantity
from .units import parse_quantity

ResolvedFamily = Literal["dense", "moe", "mla", "hybrid-ssm"]
DEFAULT_PULL_POLICY = "IfNotPresent"

# Well-known model names whose architecture changes what P/D needs. Matching is on the repository name, case-
# insensitive; anything unknown stays "dense" (no presets), and users can always set spec.model.family.
_FAMILY_BY_NAME: tuple[tuple[str, ResolvedFamily], ...] = (
    (
        r"nemotron-h|nemotron-3|jamba|bamba|mamba|falcon-h1|granite-4\.0-h|zamba|qwen3-next|qwen3\.5|qwen3\.8|"
        r"kimi-linear|lfm2|plamo2",
        "hybrid-ssm",
    ),
    (r"deepseek-v[23]|deepseek-r1|kimi-k2|glm-5|longcat|mistral-large-3", "mla"),
    (
        r"mixtral|qwen[0-9.]*-[0-9.]+b-a[0-9.]+b|qwen3-coder-[0-9]+b-a|gpt-oss|llama-4|dbrx|olmoe|phimoe|glm-4\.[5-7]|"
        r"ernie-4\.5-[0-9]+b-a|minimax",
        "moe",
    ),
)


def resolve_family(model: ModelSpec) -> ResolvedFamily:
    """The family that decides presets: the user's choice, or one inferred from a well-known model name."""
    if model.family != "auto":
        return model.family
    name = model.name.lower()
    for pattern, family in _FAMILY_BY_NAME:
        if re.search(pattern, name):
            return family
    return "dense"


# -- facts of one pool, total over any parsed spec --------------------------------------------------------------


def pool_of(spec: DisaggDeploymentSpec, role: PoolName) -> PoolSpec:
    return spec.prefill if role == "prefill" else spec.decode


def effective_engine(spec: DisaggDeploymentSpec, role: PoolName) -> EngineSettings:
    """spec.engine with the pool's engine settings laid over it (set fields win; env merges by name)."""
    shared = spec.engine
    override = pool_of(spec, role).engine
    merged: dict[str, object] = {}
    for name in EngineSettings.model_fields:
        if name in ("env", "extra_args"):
            continue
        own = getattr(override, name)
        merged[name] = own if own is not None else getattr(shared, name)
    merged["env"] = merge_env(shared.env, override.env)
    merged["extra_args"] = [*shared.extra_args, *override.extra_args]
    return EngineSettings.model_construct(**merged)  # type: ignore[arg-type]


def merge_env(base: list[EnvVar], override: list[EnvVar]) -> list[EnvVar]:
    """Environment lists merged by name: later entries replace earlier ones in place, new ones append."""
    merged: dict[str, EnvVar] = {var.name: var for var in base}
    for var in override:
        merged[var.name] = var
    return list(merged.values())


def gpus_per_replica(pool: PoolSpec) -> int:
    """GPUs one replica uses: TP x PP x PCP x DP (DCP and EP reuse those ranks)."""
    return pool.tensor_parallel * pool.pipeline_parallel * pool.prefill_context_parallel * pool.data_parallel


def gpus_per_pod(pool: PoolSpec) -> int:
    return pool.gpus_per_node or gpus_per_replica(pool) // pool.nodes_per_replica


def operator_scales(pool: PoolSpec) -> bool:
    return pool.autoscaling.enabled and pool.autoscaling.controller == "operator"


LayoutKind = Literal["single", "data-parallel", "tensor-parallel"]


@dataclass(frozen=True)
class ReplicaLayout:
    """How one replica spreads over pods: a single pod; data-parallel ranks split evenly over nodes; or, with one
    data-parallel rank, tensor/pipeline ranks spanning nodes. The last two are LeaderWorkerSet groups."""

    kind: LayoutKind
    pods: int
    """Pods (nodes) per replica: the LeaderWorkerSet group size."""
    ranks_per_pod: int
    """Data-parallel ranks (engine cores) running in one pod."""

    @property
    def multi_node(self) -> bool:
        return self.kind != "single"


def replica_layout(pool: PoolSpec) -> ReplicaLayout:
    nodes = pool.nodes_per_replica
    if nodes == 1:
        return ReplicaLayout("single", 1, pool.data_parallel)
    if pool.data_parallel > 1:
        # Validation makes dataParallel a multiple of nodesPerReplica; the floor of 1 keeps this total for the rules.
        return ReplicaLayout("data-parallel", nodes, max(1, pool.data_parallel // nodes))
    return ReplicaLayout("tensor-parallel", nodes, 1)


ONE_POD = ReplicaLayout("single", 1, 1)
"""The layout of a custom engine: one pod per replica, whatever it does inside."""


def pool_layout(pool: PoolSpec) -> ReplicaLayout:
    return replica_layout(pool) if pool.custom_container is None else ONE_POD


DEFAULT_ROLLOUT: dict[PoolName, tuple[IntOrPercent, IntOrPercent]] = {"prefill": (0, 1), "decode": (1, 0)}
"""(maxSurge, maxUnavailable): prefill may lose one replica at a time during an update; decode surges first so its
last replica never goes."""


GATED_ROLLOUT: tuple[IntOrPercent, IntOrPercent] = ("100%", 0)
"""(maxSurge, maxUnavailable) of pools behind the serving readiness gate (D102, D103): every new pod may start at
once, none is removed before a new one is admitted; the operator's admissions pace the rollout."""


def probes_pairs(router: RouterKind | None, frontend: FrontendSpec) -> bool:
    """Whether the router is the operator's frontend, whose admin API probes every prefill/decode pair: the
    built-in one (`implementation: disagg-frontend`, the default), or a custom router container that exposes a port
    named `admin` (a build of `disagg frontend` of the user's own)."""
    if router == "disagg-frontend":
        return True
    custom = frontend.router.custom_container
    return router == "custom" and custom is not None and FRONTEND_ADMIN_PORT in custom.extra_ports


def gates_pools(router: RouterKind | None, frontend: FrontendSpec, mode: CheckMode | None) -> bool:
    """Whether single-node engine pods get the serving readiness gate and the GATED_ROLLOUT defaults (D102, D103,
    D142): the pairs can be probed (probes_pairs) and the check enforces. Decided here once, for the planner (which
    passes the mode in effect: the spec's, else the operator's --serving-check) and for validation (which passes
    the spec's mode, None when unset: the operator's default is not known then, so unset counts as Enforce)."""
    return mode in (None, "Enforce") and probes_pairs(router, frontend)


def may_gate_pools(spec: DisaggDeploymentSpec) -> bool:
    """Whether single-node engine pods may get the serving readiness gate, read from the spec for validation."""
    return gates_pools(router_kind(spec), spec.frontend, spec.serving.check.mode)


def effective_rollout(pool: PoolSpec, role: PoolName, gated: bool = False) -> tuple[IntOrPercent, IntOrPercent]:
    """The pool's rolling-update limits: the defaults (of a gated pool, or of its role) with the user's settings
    laid over them."""
    surge, unavailable = GATED_ROLLOUT if gated else DEFAULT_ROLLOUT[role]
    rollout = pool.rollout
    return (
        surge if rollout.max_surge is None else rollout.max_surge,
        unavailable if rollout.max_unavailable is None else rollout.max_unavailable,
    )


# -- memory of one engine pod -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodMemory:
    """What one engine pod gets in memory (D75), decided once for the pod's resources and for `disagg plan`."""

    given: int | None
    """resources.memory in bytes, or None when the user left it to the scheduler."""
    pinned_per_engine: int
    """Host memory each engine (data-parallel rank) pins for KV: the CPU tier, the Mooncake store's segment (none
    in standalone mode, where the node's client owns the pool) and buffer."""
    engines: int
    """Engines (data-parallel ranks) in the pod."""
    shm: int
    """Size of /dev/shm, a memory-backed emptyDir: what vLLM's processes write there counts against the limit."""

    @property
    def pinned(self) -> int:
        return self.pinned_per_engine * self.engines

    @property
    def request(self) -> int | None:
        """The pod's memory request: the user's memory plus the pinned memory, or the pinned memory alone."""
        if self.given is not None:
            return self.given + self.pinned
        return self.pinned or None

    @property
    def limit(self) -> int | None:
        """Equal to the request when the user gave memory; unlimited otherwise."""
        return self.given + self.pinned if self.given is not None else None


def pinned_host_bytes(spec: DisaggDeploymentSpec, role: PoolName) -> int:
    """Host memory one engine of the pool pins for KV tiers (none for a custom engine, which gets no tiers)."""
    if pool_of(spec, role).custom_container is not None:
        return 0
    pinned = 0
    tiers = spec.kv_cache
    if tiers.cpu is not None and role in tiers.cpu.pools:
        pinned += int(parse_quantity(tiers.cpu.size))
    store = mooncake_store(spec)
    if store is not None and tiers.store is not None and role in tiers.store.pools:
        pinned += store.engine_segment_bytes() + int(parse_quantity(store.local_buffer_size))
    return pinned


def pod_memory(spec: DisaggDeploymentSpec, role: PoolName) -> PodMemory:
    pool = pool_of(spec, role)
    resources = pool.resources
    given = None if resources.memory is None else math.ceil(parse_quantity(resources.memory))
    return PodMemory(
        given=given,
        pinned_per_engine=pinned_host_bytes(spec, role),
        engines=pool_layout(pool).ranks_per_pod,
        shm=math.ceil(parse_quantity(resources.shm_size)),
    )


# -- connector settings with their defaults ---------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedTransfer:
    """spec.transfer with every connector block present: the user's settings, or the documented defaults."""

    connector: ConnectorKind
    nixl: NixlSettings
    moriio: MoriioSettings
    mooncake: MooncakeSettings
    lmcache: LmcacheSettings
    custom: CustomConnectorSettings | None
    network: NetworkSettings
    buffer_device: str | None
    load_failure_policy: str


def resolve_transfer(transfer: TransferSpec) -> ResolvedTransfer:
    return ResolvedTransfer(
        connector=transfer.connector,
        nixl=transfer.nixl or NixlSettings(),
        moriio=transfer.moriio or MoriioSettings(),
        mooncake=transfer.mooncake or MooncakeSettings(),
        lmcache=transfer.lmcache or LmcacheSettings(),
        custom=transfer.custom,
        network=transfer.network,
        buffer_device=transfer.buffer_device,
        load_failure_policy=transfer.load_failure_policy,
    )


NIXL_CLASSES = frozenset({"NixlConnector", "NixlPullConnector", "NixlPushConnector"})
"""vLLM's NIXL connector classes (factory.py): wherever one of them runs, its side channel must be reachable."""


def contains_nixl(config: Mapping[str, Any]) -> bool:
    """Whether a kv-transfer config entry is NIXL or a MultiConnector with NIXL among its connectors (at any
    depth)."""
    if config.get("kv_connector") in NIXL_CLASSES:
        return True
    children = (config.get("kv_connector_extra_config") or {}).get("connectors")
    return isinstance(children, list) and any(isinstance(c, dict) and contains_nixl(c) for c in children)


def runs_nixl(transfer: ResolvedTransfer, role: PoolName) -> bool:
    """Whether the pool's vLLM engines run a NIXL connector, and so bind its side channel (D93): connector nixl or
    nixl-push, or a custom connector that is NIXL or a MultiConnector containing it."""
    if transfer.connector in ("nixl", "nixl-push"):
        return True
    custom = transfer.custom
    if transfer.connector != "custom" or custom is None:
        return False
    per_pool = custom.prefill if role == "prefill" else custom.decode
    extra = {**custom.extra_config, **per_pool.extra_config}
    return contains_nixl({"kv_connector": custom.connector_class, "kv_connector_extra_config": extra})


@dataclass(frozen=True)
class LmcacheServer:
    """The shared LMCache server and how its clients reach it."""

    port: int
    size: Quantity
    image: str
    chunk_size: int | None


def lmcache_server(spec: DisaggDeploymentSpec) -> LmcacheServer | None:
    """The LMCache server's settings when anything uses LMCache (the transfer connector or the store tier): the
    store block describes the server when given, else the transfer's settings or their defaults do."""
    store = spec.kv_cache.store
    if spec.transfer.connector != "lmcache" and (store is None or store.type != "lmcache"):
        return None
    own = store.lmcache if store is not None else None
    channel = spec.transfer.lmcache or LmcacheSettings()
    return LmcacheServer(
        port=own.port if own else channel.server_port,
        size=own.size if own else channel.server_size,
        image=(own.server_image if own else None) or shared_image(spec),
        chunk_size=channel.chunk_size if channel.chunk_size is not None else (own.chunk_size if own else None),
    )


def mooncake_store(spec: DisaggDeploymentSpec) -> MooncakeStore | None:
    store = spec.kv_cache.store
    if store is None or store.type != "mooncake":
        return None
    return store.mooncake or MooncakeStore()


def pegaflow_store(spec: DisaggDeploymentSpec) -> PegaflowStore | None:
    store = spec.kv_cache.store
    return store.pegaflow if store is not None and store.type == "pegaflow" else None


def shared_image(spec: DisaggDeploymentSpec) -> str:
    """The image of what is not an engine pool but runs vLLM's code (render tier, KV-store daemons)."""
    return spec.engine.image or DEFAULT_ENGINE_IMAGE


# -- the router and the flow it drives ---------------------------------------------------------------------------

RouterKind = Literal["disagg-frontend", "vllm-router", "custom"]
VLLM_ROUTER_FLOWS: frozenset[FlowName] = frozenset({"pull", "mooncake", "moriio-read"})
"""What vllm-router 0.1.17 drives: NIXL pull (also LMCache, whose KV moves through its server, and custom
connectors speaking NIXL's protocol), Mooncake, and MoRI-IO read. Not push (no concurrent dispatch with prefill's
coordinates), bidirectional (it blanks the client's kv_transfer_params before prefill), MoRI-IO write, nor the
render tier (it does not drive render -> generate -> derender)."""


def router_kind(spec: DisaggDeploymentSpec) -> RouterKind | None:
    """Which router fronts the engines: a custom container, our frontend or vllm-router; None when a custom
    connector names no P/D protocol (the decode pool's own endpoint is then the Service's)."""
    router = spec.frontend.router
    if router.custom_container is not None:
        return "custom"
    if spec.transfer.connector == "custom" and (
        spec.transfer.custom is None or spec.transfer.custom.router_protocol is None
    ):
        return None
    return router.implementation


def transfer_flow(transfer: TransferSpec) -> FlowName | None:
    """The P/D flow a router must drive for this transfer; None for a custom connector that names no protocol."""
    connector = transfer.connector
    if connector == "nixl":
        nixl = transfer.nixl or NixlSettings()
        return "bidirectional" if nixl.bidirectional.enabled else "pull"
    if connector == "nixl-push":
        return "push"
    if connector == "moriio":
        return "moriio-read" if (transfer.moriio or MoriioSettings()).mode == "read" else "moriio-write"
    if connector == "mooncake":
        return "mooncake"
    if connector == "lmcache":
        return "pull"  # prefill first, then decode; the KV itself goes through the LMCache server
    custom = transfer.custom
    protocol = custom.router_protocol if custom is not None else None
    if protocol == "nixl":
        return "pull"
    if protocol == "mooncake":
        return "mooncake"
    if protocol == "moriio":
        return "moriio-read" if custom is not None and custom.extra_config.get("read_mode") is True else "moriio-write"
    return None


# -- the resolved view ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedPool:
    """One pool as every planner sees it."""

    role: PoolName
    spec: PoolSpec
    engine: EngineSettings
    """spec.engine with this pool's overrides laid over it."""
    image: str
    image_pull_policy: str
    layout: ReplicaLayout
    gpus_per_replica: int
    gpus_per_pod: int
    memory: PodMemory
    selector: dict[str, str]
    """Labels selecting every pod of the pool."""
    api_selector: dict[str, str]
    """Labels selecting the pods that serve HTTP: the leaders of multi-node replicas, every pod otherwise."""

    @property
    def custom(self) -> CustomContainer | None:
        return self.spec.custom_container

    @property
    def replicas_owned_elsewhere(self) -> bool:
        """An autoscaler (ours, or an external HPA/KEDA) owns the replica count; spec.replicas only starts it."""
        return self.spec.autoscaling.enabled


def resolve_pool(spec: DisaggDeploymentSpec, deployment: str, role: PoolName) -> ResolvedPool:
    pool = pool_of(spec, role)
    engine = effective_engine(spec, role)
    layout = pool_layout(pool)
    return ResolvedPool(
        role=role,
        spec=pool,
        engine=engine,
        image=engine.image or DEFAULT_ENGINE_IMAGE,
        image_pull_policy=engine.image_pull_policy or DEFAULT_PULL_POLICY,
        layout=layout,
        gpus_per_replica=gpus_per_replica(pool),
        gpus_per_pod=gpus_per_pod(pool),
        memory=pod_memory(spec, role),
        selector=selector_labels(deployment, role),
        api_selector=api_pod_selector(deployment, role, layout.multi_node),
    )


@dataclass(frozen=True)
class ResolvedDeployment:
    """A validated DisaggDeployment as the plan stage reads it: shared settings, both pools and the KV plumbing,
    with every default applied and every derived fact decided."""

    name: str
    namespace: str | None
    family: ResolvedFamily
    model: ModelSpec
    chat: ChatSettings
    python_hash_seed: int
    shared_image: str
    shared_pull_policy: str
    max_model_len: int | None
    """spec.engine.maxModelLen, which the render tier shares with the engines."""
    prefill: ResolvedPool
    decode: ResolvedPool
    transfer: ResolvedTransfer
    kv_cache: KvCacheSpec
    mooncake_store: MooncakeStore | None
    lmcache: LmcacheServer | None
    pegaflow: PegaflowStore | None
    frontend: FrontendSpec
    serving: ServingSpec
    router: RouterKind | None
    """Which router fronts the engines (None: the decode pool's own endpoint is the Service's)."""
    flow: FlowName | None
    """The P/D flow the router drives."""

    @property
    def pools(self) -> tuple[ResolvedPool, ResolvedPool]:
        return self.prefill, self.decode

    def pool(self, role: PoolName) -> ResolvedPool:
        return self.prefill if role == "prefill" else self.decode

    @property
    def tokens_only(self) -> bool:
        """With a render tier, engines take and return token ids only."""
        return self.frontend.render.enabled


def resolve_deployment(deployment: DisaggDeployment, namespace: str | None = None) -> ResolvedDeployment:
    spec = deployment.spec
    name = deployment.metadata.name
    prefill, decode = (resolve_pool(spec, name, role) for role in POOLS)
    return ResolvedDeployment(
        name=name,
        namespace=namespace or deployment.metadata.namespace,
        family=resolve_family(spec.model),
        model=spec.model,
        chat=spec.engine.chat,
        python_hash_seed=spec.engine.python_hash_seed,
        shared_image=shared_image(spec),
        shared_pull_policy=spec.engine.image_pull_policy or DEFAULT_PULL_POLICY,
        max_model_len=spec.engine.max_model_len,
        prefill=prefill,
        decode=decode,
        transfer=resolve_transfer(spec.transfer),
        kv_cache=spec.kv_cache,
        mooncake_store=mooncake_store(spec),
        lmcache=lmcache_server(spec),
        pegaflow=pegaflow_store(spec),
        frontend=spec.frontend,
        serving=spec.serving,
        router=router_kind(spec),
        flow=transfer_flow(spec.transfer),
    )
