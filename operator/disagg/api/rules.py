"""Cross-field rules: what makes a prefill pool and a decode pool able to work together.

Each rule is a function of the parsed spec that returns Problems with the exact field path and a fix. Rules the
API server can check itself are also declared as CEL next to the models; the tests hold both to the same verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal

from disagg.names import POOLS

from .deployment import DisaggDeploymentSpec
from .engine import EngineSettings
from .errors import Problem
from .frontend import FRONTEND_POLICIES, VLLM_ROUTER_POLICIES
from .object_rules import OBJECT_RULES, engine_port_ranges, flag_name
from .owned import (
    FIELD_BACKED_ENGINE_ENV,
    OWNED_ENGINE_ENV,
    OWNED_ENGINE_FLAGS,
    OWNED_FRONTEND_FLAGS,
    OWNED_ROUTER_FLAGS,
)
from .pool import PoolName, PoolSpec
from .resolve import (
    ResolvedFamily,
    effective_engine,
    gpus_per_replica,
    operator_scales,
    replica_layout,
    resolve_family,
    router_kind,
    transfer_flow,
)
from .types import ArgList
from .units import parse_duration

Rule = Callable[[DisaggDeploymentSpec, ResolvedFamily], Iterator[Problem]]


def check_spec(spec: DisaggDeploymentSpec) -> list[Problem]:
    """Run every rule, and those that keep the rendered objects acceptable to the API server (object_rules.py);
    the result is sorted so reports are stable."""
    family = resolve_family(spec.model)
    return sorted({problem for check in [*RULES, *OBJECT_RULES] for problem in check(spec, family)})


def _pools(spec: DisaggDeploymentSpec) -> Iterator[tuple[PoolName, PoolSpec]]:
    yield "prefill", spec.prefill
    yield "decode", spec.decode


def storage_has_one_source(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    storage = spec.model.storage
    chosen = [
        name
        for name, value in (
            ("persistentVolumeClaim", storage.persistent_volume_claim),
            ("hostPath", storage.host_path),
            ("huggingFace", storage.hugging_face),
        )
        if value is not None
    ]
    if len(chosen) > 1:
        yield Problem(
            "spec.model.storage",
            f"{' and '.join(chosen)} are set together",
            "keep exactly one storage source, or none to download from Hugging Face",
        )


def replica_topology_needs_multi_node(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        if pool.scheduling.replica_topology_key is not None and not replica_layout(pool).multi_node:
            yield Problem(
                f"spec.{role}.scheduling.replicaTopologyKey",
                "it keeps the pods of a multi-node replica together, and this pool has one node per replica",
                "set nodesPerReplica above 1, or remove it and use scheduling.affinity",
            )


def resource_claims_are_well_formed(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        seen: set[str] = set()
        for index, claim in enumerate(pool.resources.claims):
            path = f"spec.{role}.resources.claims[{index}]"
            sources = [claim.resource_claim_template_name, claim.resource_claim_name]
            if sum(source is not None for source in sources) != 1:
                yield Problem(
                    path,
                    "a resource claim needs exactly one source",
                    "set resourceClaimTemplateName (a claim per pod) or resourceClaimName (one shared claim)",
                )
            if claim.name in seen:
                yield Problem(f"{path}.name", f"claim name {claim.name!r} is used twice", "give every claim a name")
            seen.add(claim.name)


def connector_blocks_match(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    transfer = spec.transfer
    owners = {
        "nixl": ("nixl", "nixl-push"),
        "moriio": ("moriio",),
        "mooncake": ("mooncake",),
        "lmcache": ("lmcache",),
        "custom": ("custom",),
    }
    for block, connectors in owners.items():
        if getattr(transfer, block) is not None and transfer.connector not in connectors:
            yield Problem(
                f"spec.transfer.{block}",
                f"set, but spec.transfer.connector is {transfer.connector}",
                f"remove spec.transfer.{block}, or set spec.transfer.connector to {' or '.join(connectors)}",
            )
    if transfer.connector == "custom" and transfer.custom is None:
        yield Problem(
            "spec.transfer.custom",
            "required when spec.transfer.connector is custom",
            "add spec.transfer.custom with connectorClass (and modulePath for out-of-tree plugins)",
        )


def bidirectional_is_pull_only(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    nixl = spec.transfer.nixl
    if spec.transfer.connector == "nixl-push" and nixl is not None and nixl.bidirectional.enabled:
        yield Problem(
            "spec.transfer.nixl.bidirectional.enabled",
            "bidirectional KV transfer works only in pull mode",
            "set spec.transfer.connector to nixl, or turn bidirectional off",
        )


def push_mode_limits(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.transfer.connector != "nixl-push":
        return
    if spec.decode.decode_context_parallel > 1:
        yield Problem(
            "spec.decode.decodeContextParallel",
            "connector nixl-push does not support decode context parallelism",
            "set it to 1, or use connector nixl",
        )
    if spec.decode.pipeline_parallel > 1:
        yield Problem(
            "spec.decode.pipelineParallel",
            "connector nixl-push does not support pipeline parallelism on the decode side",
            "set it to 1, or use connector nixl",
        )


_VLLM_ROUTER_CANNOT = {
    "push": "NIXL push: it cannot send decode's leg with prefill's coordinates while prefill runs",
    "bidirectional": "bidirectional multi-turn: it replaces the client's kv_transfer_params with a blank set "
    "before prefill, so no turn reads the history back",
    "moriio-write": "MoRI-IO write mode: it needs both legs dispatched at once",
}


def router_drives_the_flow(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    """Never deploy a router that would look Ready while it cannot serve the flow the spec asks for."""
    if router_kind(spec) != "vllm-router":
        return
    flow = transfer_flow(spec.transfer)
    if flow in _VLLM_ROUTER_CANNOT:
        yield Problem(
            "spec.frontend.router.implementation",
            f"vllm-router 0.1.17 cannot drive {_VLLM_ROUTER_CANNOT[flow]}",
            "remove implementation (the operator's frontend, disagg-frontend, drives this flow), or change "
            "spec.transfer",
        )
    if spec.frontend.render.enabled:
        yield Problem(
            "spec.frontend.router.implementation",
            "vllm-router 0.1.17 cannot drive the render tier (render -> generate on --tokens-only engines -> derender)",
            "remove implementation (disagg-frontend drives the render tier), or turn spec.frontend.render off",
        )


def router_policies_exist(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    kind = router_kind(spec)
    if kind not in ("vllm-router", "disagg-frontend"):
        return
    router = spec.frontend.router
    offered = FRONTEND_POLICIES if kind == "disagg-frontend" else VLLM_ROUTER_POLICIES
    for name, value in (
        ("policy", router.policy),
        ("prefillPolicy", router.prefill_policy),
        ("decodePolicy", router.decode_policy),
    ):
        if value is not None and value not in offered:
            yield Problem(
                f"spec.frontend.router.{name}",
                f"{kind} has no policy {value}",
                f"use one of {', '.join(offered)}"
                + (", or set implementation: vllm-router" if kind == "disagg-frontend" else ""),
            )


def heterogeneous_tp_divides(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    prefill_tp, decode_tp = spec.prefill.tensor_parallel, spec.decode.tensor_parallel
    larger, smaller = max(prefill_tp, decode_tp), min(prefill_tp, decode_tp)
    if larger % smaller:
        below = larger // smaller * smaller
        above = below + smaller
        which = "decode" if decode_tp == larger else "prefill"
        yield Problem(
            "spec.decode.tensorParallel",
            f"prefill TP {prefill_tp} and decode TP {decode_tp} cannot exchange KV: the larger TP must be a multiple "
            "of the smaller",
            f"set {which} tensorParallel to a multiple of {smaller}, such as {below} or {above}",
        )


def gpu_arithmetic(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        total = gpus_per_replica(pool)
        nodes = pool.nodes_per_replica
        formula = (
            f"tensorParallel {pool.tensor_parallel} x pipelineParallel {pool.pipeline_parallel} x "
            f"prefillContextParallel {pool.prefill_context_parallel} x dataParallel {pool.data_parallel} = {total}"
        )
        if total % nodes:
            yield Problem(
                f"spec.{role}.nodesPerReplica",
                f"{total} GPUs per replica ({formula}) do not split evenly across {nodes} nodes",
                "choose nodesPerReplica that divides the GPUs per replica, or change the parallelism",
            )
        elif pool.gpus_per_node is not None and pool.gpus_per_node * nodes != total:
            yield Problem(
                f"spec.{role}.gpusPerNode",
                f"{pool.gpus_per_node} GPUs per node x {nodes} nodes != {total} GPUs per replica ({formula})",
                f"set gpusPerNode to {total // nodes}, or remove it to let the operator compute it",
            )


def data_parallel_spreads_evenly(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        nodes = pool.nodes_per_replica
        if replica_layout(pool).kind != "data-parallel":
            continue
        if pool.data_parallel % nodes:
            yield Problem(
                f"spec.{role}.dataParallel",
                f"{pool.data_parallel} data-parallel ranks cannot be spread evenly over {nodes} nodes",
                "make dataParallel a multiple of nodesPerReplica (each node then hosts the same number of ranks), "
                "or use dataParallel 1 to span nodes with tensor/pipeline parallelism",
            )


def context_parallel_limits(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        if pool.tensor_parallel % pool.decode_context_parallel:
            yield Problem(
                f"spec.{role}.decodeContextParallel",
                f"{pool.decode_context_parallel} does not divide tensorParallel {pool.tensor_parallel} (DCP reuses "
                "the TP ranks)",
                "choose a decodeContextParallel that divides tensorParallel",
            )
    if spec.decode.prefill_context_parallel > 1:
        yield Problem(
            "spec.decode.prefillContextParallel",
            "prefill context parallelism only applies to the prefill pool (the connector accepts it only on the "
            "KV producer)",
            "set it to 1",
        )


def custom_container_placement(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.prefill.custom_container is not None:
        yield Problem(
            "spec.prefill.customContainer",
            "the prefill pool always runs vLLM",
            "remove it; only the decode pool may run a non-vLLM engine",
        )
    if spec.decode.custom_container is not None and spec.transfer.connector != "custom":
        yield Problem(
            "spec.decode.customContainer",
            "a non-vLLM decode engine needs a plugin connector that speaks its protocol",
            "set spec.transfer.connector to custom with spec.transfer.custom, or remove customContainer",
        )
    if spec.decode.custom_container is not None and spec.frontend.render.enabled:
        yield Problem(
            "spec.frontend.render.enabled",
            "the render tier needs token-in/token-out vLLM engines, but the decode pool runs a custom container",
            "turn the render tier off, or run vLLM on the decode pool",
        )


def custom_connector_roles(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    custom = spec.transfer.custom
    if spec.transfer.connector != "custom" or custom is None:
        return
    if custom.prefill.role == "consumer":
        yield Problem(
            "spec.transfer.custom.prefill.role",
            "the prefill pool produces KV, so it cannot be a consumer only",
            "use producer or both",
        )
    if custom.decode.role == "producer":
        yield Problem(
            "spec.transfer.custom.decode.role",
            "the decode pool consumes KV, so it cannot be a producer only",
            "use consumer or both",
        )


def expert_parallel_needs_moe(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.model.family != "dense":
        return
    for role, pool in _pools(spec):
        if pool.expert_parallel:
            yield Problem(
                f"spec.{role}.expertParallel",
                "expert parallelism needs a mixture-of-experts model, but spec.model.family is dense",
                "turn expertParallel off, or set spec.model.family to moe, mla or auto",
            )


def hybrid_ssm_requirements(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if family != "hybrid-ssm":
        return
    if spec.transfer.connector == "lmcache":
        yield Problem(
            "spec.transfer.connector",
            "hybrid SSM models need the hybrid KV cache manager, which the LMCache connector does not support",
            "use connector nixl, nixl-push, mooncake or moriio",
        )
    if spec.kv_cache.store is not None and spec.kv_cache.store.type == "lmcache":
        yield Problem(
            "spec.kvCache.store.type",
            "hybrid SSM models need the hybrid KV cache manager, which the LMCache connector does not support",
            "use a mooncake store, or no store",
        )
    sizes = {role: effective_engine(spec, role).block_size for role in POOLS}
    if sizes["prefill"] != sizes["decode"]:
        yield Problem(
            "spec.decode.engine.blockSize",
            f"hybrid SSM models need the same block size on both pools (prefill {sizes['prefill']}, decode "
            f"{sizes['decode']})",
            "set spec.engine.blockSize once and remove the per-pool overrides",
        )
    for role in POOLS:
        engine = effective_engine(spec, role)
        if spec.kv_cache.cpu is not None and role in spec.kv_cache.cpu.pools and engine.prefix_caching is False:
            yield Problem(
                f"spec.{role}.engine.prefixCaching",
                "KV offloading for hybrid models needs prefix caching so block sizes align",
                "remove prefixCaching: false, or drop the CPU tier for this pool",
            )
    for path, settings in _engine_sources(spec):
        for index, arg in enumerate(settings.extra_args):
            if arg.split("=", 1)[0] == "--disable-hybrid-kv-cache-manager":
                yield Problem(
                    f"{path}.extraArgs[{index}]",
                    "hybrid SSM models require the hybrid KV cache manager",
                    "remove --disable-hybrid-kv-cache-manager",
                )
        for index, var in enumerate(settings.env):
            if var.name == "VLLM_SSM_CONV_STATE_LAYOUT" and var.value != "DS":
                yield Problem(
                    f"{path}.env[{index}]",
                    "VLLM_SSM_CONV_STATE_LAYOUT must be DS for hybrid SSM models in P/D (the operator sets it)",
                    "remove the variable",
                )


def _engine_sources(spec: DisaggDeploymentSpec) -> Iterator[tuple[str, EngineSettings]]:
    """Every place engine settings are written, with its path."""
    yield "spec.engine", spec.engine
    for role, pool in _pools(spec):
        yield f"spec.{role}.engine", pool.engine


def block_sizes_compatible(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if family == "hybrid-ssm":
        return
    prefill = effective_engine(spec, "prefill").block_size
    decode = effective_engine(spec, "decode").block_size
    if prefill is not None and decode is not None and prefill > decode:
        yield Problem(
            "spec.prefill.engine.blockSize",
            f"prefill block size {prefill} is larger than decode's {decode}; KV transfer allows only prefill <= decode",
            "use the same block size on both pools (set spec.engine.blockSize)",
        )


def kv_cache_dtype_matches(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.decode.custom_container is not None:
        return
    prefill = effective_engine(spec, "prefill").kv_cache_dtype or "auto"
    decode = effective_engine(spec, "decode").kv_cache_dtype or "auto"
    if prefill != decode:
        yield Problem(
            "spec.decode.engine.kvCacheDtype",
            f"prefill stores KV as {prefill} but decode as {decode}; the KV handshake requires the same dtype",
            "set spec.engine.kvCacheDtype once and remove the per-pool overrides",
        )


def speculative_method_matches(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.decode.custom_container is not None:
        return
    prefill = effective_engine(spec, "prefill").speculative
    decode = effective_engine(spec, "decode").speculative
    shape_p = None if prefill is None else (prefill.method, prefill.model)
    shape_d = None if decode is None else (decode.method, decode.model)
    if shape_p != shape_d:
        yield Problem(
            "spec.decode.engine.speculative",
            f"speculative decoding differs between pools (prefill {_describe_spec(shape_p)}, decode "
            f"{_describe_spec(shape_d)}); the KV handshake requires the same method and draft model",
            "use the same method and model on both pools (numSpeculativeTokens may differ)",
        )


def _describe_spec(shape: tuple[str, str | None] | None) -> str:
    if shape is None:
        return "off"
    method, model = shape
    return method if model is None else f"{method} with {model}"


def autoscaling_bounds(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        bounds = pool.autoscaling
        if bounds.max_replicas is not None and bounds.min_replicas > bounds.max_replicas:
            yield Problem(
                f"spec.{role}.autoscaling.minReplicas",
                f"minReplicas {bounds.min_replicas} exceeds maxReplicas {bounds.max_replicas}",
                "lower minReplicas or raise maxReplicas",
            )
        if operator_scales(pool) and bounds.max_replicas is None:
            yield Problem(
                f"spec.{role}.autoscaling.maxReplicas",
                "required when the operator scales the pool",
                "set maxReplicas to the most replicas you can afford",
            )
    slo = spec.scaling.slo
    if operator_scales(spec.prefill) and slo.ttft_p90 is None:
        yield Problem(
            "spec.scaling.slo.ttftP90",
            "required to scale the prefill pool (it is sized for time to first token)",
            "set a target such as 2s",
        )
    if operator_scales(spec.decode) and slo.itl_p90 is None:
        yield Problem(
            "spec.scaling.slo.itlP90",
            "required to scale the decode pool (it is sized for inter-token latency)",
            "set a target such as 50ms",
        )


def scaling_settings_consistent(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    scaling = spec.scaling
    if (scaling.metrics.source == "prometheus") != (scaling.metrics.prometheus is not None):
        yield Problem(
            "spec.scaling.metrics.prometheus",
            "must be set exactly when spec.scaling.metrics.source is prometheus",
            "add prometheus.url with source prometheus, or remove the block",
        )
    ratio = scaling.ratio
    if ratio.min is not None and ratio.max is not None and ratio.min > ratio.max:
        yield Problem("spec.scaling.ratio.min", f"{ratio.min} exceeds ratio.max {ratio.max}", "swap or widen them")
    if scaling.max_gpus is not None:
        floor = 0
        for pool in (spec.prefill, spec.decode):
            replicas = pool.autoscaling.min_replicas if operator_scales(pool) else pool.replicas
            floor += replicas * gpus_per_replica(pool)
        if floor > scaling.max_gpus:
            yield Problem(
                "spec.scaling.maxGpus",
                f"the pools need at least {floor} GPUs at their minimum sizes, above the budget of {scaling.max_gpus}",
                f"raise maxGpus to at least {floor}, or lower the pools' (minimum) replicas",
            )


def kv_tiers_consistent(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    tiers = spec.kv_cache
    if tiers.disk is not None:
        if tiers.cpu is None:
            yield Problem(
                "spec.kvCache.disk",
                "the disk tier sits behind the CPU tier (vLLM's tiering offload needs a primary CPU tier)",
                "add spec.kvCache.cpu with a size",
            )
        elif not set(tiers.disk.pools) <= set(tiers.cpu.pools):
            yield Problem(
                "spec.kvCache.disk.pools",
                "every pool with the disk tier needs the CPU tier too",
                "add those pools to spec.kvCache.cpu.pools, or remove them here",
            )
        volume = tiers.disk.volume
        chosen = [name for name in ("empty_dir", "persistent_volume_claim", "host_path") if getattr(volume, name)]
        if len(chosen) > 1:
            yield Problem(
                "spec.kvCache.disk.volume",
                "more than one volume source is set",
                "keep exactly one of emptyDir, persistentVolumeClaim or hostPath",
            )
    store = tiers.store
    if store is not None:
        for block in ("mooncake", "lmcache", "pegaflow"):
            if getattr(store, block) is not None and store.type != block:
                yield Problem(
                    f"spec.kvCache.store.{block}",
                    f"set, but spec.kvCache.store.type is {store.type}",
                    f"remove it, or set type to {block}",
                )
        if store.type == "pegaflow" and store.pegaflow is None:
            yield Problem(
                "spec.kvCache.store.pegaflow",
                "type pegaflow needs the server's settings",
                "add spec.kvCache.store.pegaflow.server.image (the image with pegaflow-server)",
            )


def store_daemons_consistent(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    store = spec.kv_cache.store
    if store is None:
        return
    mooncake = store.mooncake
    if mooncake is not None:
        if mooncake.mode == "standalone" and mooncake.global_segment_size is not None:
            yield Problem(
                "spec.kvCache.store.mooncake.globalSegmentSize",
                "in standalone mode engines contribute no segment (vLLM requires 0): the node's client owns the pool",
                "remove it and size the pool with spec.kvCache.store.mooncake.client.segmentSize",
            )
        if mooncake.mode == "embedded" and mooncake.client is not None:
            yield Problem(
                "spec.kvCache.store.mooncake.client",
                "the per-node client exists only in standalone mode",
                "set spec.kvCache.store.mooncake.mode: standalone, or remove client",
            )
    if store.type == "pegaflow":
        for role, pool in _pools(spec):
            if role in store.pools and pool.resources.gpu_resource_name != "nvidia.com/gpu":
                yield Problem(
                    f"spec.{role}.resources.gpuResourceName",
                    f"PegaFlow's server reads KV from vLLM workers through CUDA IPC, and {role} asks for "
                    f"{pool.resources.gpu_resource_name}",
                    f"run {role} on NVIDIA GPUs, or remove {role} from spec.kvCache.store.pools",
                )
            if role in store.pools and spec.transfer.network.host_network:
                yield Problem(
                    "spec.transfer.network.hostNetwork",
                    "PegaFlow's server owns ports of the node, and engines on the host network would share them",
                    "turn hostNetwork off for the engines (they reach the server at the node's address)",
                )


def owned_engine_flags(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    yield from _owned_flag_problems("spec.engine.extraArgs", spec.engine.extra_args, OWNED_ENGINE_FLAGS, "spec.engine")
    for role, pool in _pools(spec):
        yield from _owned_flag_problems(
            f"spec.{role}.engine.extraArgs", pool.engine.extra_args, OWNED_ENGINE_FLAGS, f"spec.{role}"
        )
    if router_kind(spec) in ("vllm-router", "disagg-frontend"):
        owned = OWNED_ROUTER_FLAGS if spec.frontend.router.implementation == "vllm-router" else OWNED_FRONTEND_FLAGS
        yield from _owned_flag_problems(
            "spec.frontend.router.extraArgs", spec.frontend.router.extra_args, owned, "spec.frontend.router"
        )


def _owned_flag_problems(path: str, args: ArgList, owned: dict[str, str], scope: str) -> Iterator[Problem]:
    for index, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        flag = flag_name(arg)  # vLLM reads --tensor_parallel_size as --tensor-parallel-size
        if flag in owned:
            yield Problem(f"{path}[{index}]", f"{flag} is rendered by the operator", _owned_fix(owned[flag], scope))
            continue
        abbreviated = sorted(name for name in owned if flag.startswith("--") and name.startswith(flag))
        if len(flag) > 3 and abbreviated:
            yield Problem(
                f"{path}[{index}]",
                f"{flag} abbreviates {abbreviated[0]}, which the operator renders (vLLM accepts prefixes, so it would "
                "silently override the rendered value)",
                _owned_fix(owned[abbreviated[0]], scope),
            )


def _owned_fix(target: str, scope: str) -> str:
    """How to get the effect of an owned flag: the field that controls it, spelled for the scope it was found in."""
    if target.startswith("nothing"):
        return f"remove it: {target.removeprefix('nothing ').strip('()')}"
    pool_scope = scope if scope in ("spec.prefill", "spec.decode") else None
    if target.startswith("<pool>"):
        field = target.replace("<pool>", pool_scope or "spec.prefill/spec.decode")
    elif target.startswith("engine."):
        field = f"{pool_scope or 'spec'}.{target}"
    else:
        field = target
    return f"remove it and set {field} instead"


def owned_engine_env(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    network = spec.transfer.network
    for path, settings in _engine_sources(spec):
        for index, var in enumerate(settings.env):
            if var.name in OWNED_ENGINE_ENV:
                target = OWNED_ENGINE_ENV[var.name]
                fix = f"remove it: {target}" if target.startswith("nothing") else f"remove it and set {target} instead"
                yield Problem(f"{path}.env[{index}]", f"{var.name} is set by the operator", fix)
            elif var.name in FIELD_BACKED_ENGINE_ENV:
                attribute, field = FIELD_BACKED_ENGINE_ENV[var.name]
                if getattr(network, attribute) is not None:
                    yield Problem(
                        f"{path}.env[{index}]",
                        f"{var.name} is also set by {field}",
                        f"keep only one: remove the variable or {field}",
                    )
            if var.value is not None and var.value_from is not None:
                yield Problem(f"{path}.env[{index}]", "both value and valueFrom are set", "keep exactly one of them")


def engine_ports_distinct(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    for role, pool in _pools(spec):
        if role == "decode" and pool.custom_container is not None:
            continue
        ranges = engine_port_ranges(spec, role)
        for i, (name_a, low_a, high_a) in enumerate(ranges):
            for name_b, low_b, high_b in ranges[i + 1 :]:
                if low_a <= high_b and low_b <= high_a:
                    yield Problem(
                        name_b if name_b.startswith("spec.") else name_a,
                        f"in the {role} pool, ports {low_b}-{high_b} ({name_b}) overlap ports {low_a}-{high_a} "
                        f"({name_a})",
                        "move the base port so the ranges are disjoint",
                    )


# -- the serving check (D100-D107) -------------------------------------------------------------------------------

SERVING_MIN_INTERVAL = 1
"""Seconds. A shorter period re-probes every pair almost continuously (user traffic shares those engines)."""
SERVING_DEADLINE_RANGE = (1, 60)
"""Seconds. Below 1 s no pair can answer, so every pair fails (and Recreate restarts engines that serve); a round
holds a reconcile worker for up to deadline + 15 s, so a longer one stalls the DisaggDeployments behind it."""
SERVING_MIN_COOLDOWN = 10
"""Seconds. The cooldown is what rate-limits Recreate; shorter, restarts could follow the 2 s re-checks."""
SERVING_MIN_PROGRESS = 60
"""Seconds. New engines load a model before their pairs can pass; a shorter deadline calls every rollout stuck."""


def serving_settings_consistent(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    serving = spec.serving
    interval = parse_duration(serving.check.interval)
    if interval < SERVING_MIN_INTERVAL:
        yield Problem(
            "spec.serving.check.interval",
            f"{serving.check.interval} would probe every pair almost continuously",
            f"use at least {SERVING_MIN_INTERVAL}s, such as 10s",
        )
    low, high = SERVING_DEADLINE_RANGE
    deadline = parse_duration(serving.check.deadline)
    if deadline < low:
        yield Problem(
            "spec.serving.check.deadline",
            f"{serving.check.deadline} is too short for any pair to answer, so every pair would fail",
            f"use at least {low}s, such as 10s",
        )
    elif deadline > high:
        yield Problem(
            "spec.serving.check.deadline",
            f"{serving.check.deadline} would hold a reconcile worker for that long each round",
            f"use at most {high}s",
        )
    if parse_duration(serving.remediation.cooldown) < SERVING_MIN_COOLDOWN:
        yield Problem(
            "spec.serving.remediation.cooldown",
            f"{serving.remediation.cooldown} would let engine restarts follow each other every few seconds",
            f"use at least {SERVING_MIN_COOLDOWN}s, such as 2m",
        )
    if parse_duration(serving.remediation.drain_for) < interval:
        yield Problem(
            "spec.serving.remediation.drainFor",
            f"{serving.remediation.drain_for} is shorter than spec.serving.check.interval "
            f"({serving.check.interval}), so a drain would lapse before the next round could renew it",
            "use at least the check interval, such as 5m",
        )
    progress = parse_duration(serving.rollout.progress_deadline)
    floor = max(interval, Decimal(SERVING_MIN_PROGRESS))
    if progress < floor:
        yield Problem(
            "spec.serving.rollout.progressDeadline",
            f"{serving.rollout.progress_deadline} would call a rollout stuck before its new engines could load "
            "and be checked",
            f"use at least {floor}s (a minute, and no less than spec.serving.check.interval), such as 15m",
        )


# Listed here rather than registered by a decorator: mutmut 3 does not mutate decorated functions, and mutation
# testing (docs/testing.md) must reach every rule. A rule left out of the list leaves its problems unreached, which
# the bad-spec meta-test in tests/unit/api/test_rules.py reports.
RULES: tuple[Rule, ...] = (
    storage_has_one_source,
    replica_topology_needs_multi_node,
    resource_claims_are_well_formed,
    connector_blocks_match,
    bidirectional_is_pull_only,
    push_mode_limits,
    router_drives_the_flow,
    router_policies_exist,
    heterogeneous_tp_divides,
    gpu_arithmetic,
    data_parallel_spreads_evenly,
    context_parallel_limits,
    custom_container_placement,
    custom_connector_roles,
    expert_parallel_needs_moe,
    hybrid_ssm_requirements,
    block_sizes_compatible,
    kv_cache_dtype_matches,
    speculative_method_matches,
    autoscaling_bounds,
    scaling_settings_consistent,
    kv_tiers_consistent,
    store_daemons_consistent,
    owned_engine_flags,
    owned_engine_env,
    engine_ports_distinct,
    serving_settings_consistent,
)
