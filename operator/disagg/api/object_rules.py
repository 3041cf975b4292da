"""Rules that keep every rendered object acceptable to the API server, checked on the spec (D72).

The schema and the cross-field rules (rules.py) say whether a spec makes sense; these say whether the objects it
renders will be accepted: ports that fit and differ, environment variables named once, resources the API
server allows in the amounts it allows, mount paths that differ, rolling-update limits a Deployment takes, and
settings that would silently be overridden. Each names the field and the fix, like every other rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from disagg.frontend.contract import CONTRACT_ANNOTATIONS, LABEL_PAIRING_REVISION
from disagg.names import POOLS, PoolName, common_labels

from .deployment import DisaggDeploymentSpec
from .engine import EngineSettings
from .errors import Problem
from .frontend import ResourceRequirements
from .kube_syntax import (
    backstep_error,
    container_resource_error,
    extended_resource_error,
    hugepage_size,
    is_extended_resource,
    port_name_error,
    sub_path_error,
)
from .kvcache import DEFAULT_HUGEPAGE_SIZE
from .owned import ENGINE_HTTP_PORT, OPERATOR_MOUNT_PATHS, ROUTER_ENV
from .pool import CustomContainer
from .resolve import (
    ResolvedFamily,
    effective_rollout,
    may_gate_pools,
    mooncake_store,
    pegaflow_store,
    pod_memory,
    pool_layout,
    pool_of,
    resolve_transfer,
    router_kind,
    runs_nixl,
)
from .types import EnvVar, IntOrPercent
from .units import parse_quantity

ObjectRule = Callable[[DisaggDeploymentSpec, ResolvedFamily], Iterator[Problem]]
OBJECT_RULES: list[ObjectRule] = []
MAX_PORT = 65535
_PERCENT = re.compile(r"[0-9]+%")
OPERATOR_LABEL_KEYS = tuple(common_labels("x", "prefill"))
"""Labels the operator puts on every child and selects pods by: a user's value would be silently replaced."""
SPECULATIVE_FIELDS = {"method": "method", "model": "model", "num_speculative_tokens": "numSpeculativeTokens"}
"""--speculative-config keys the fields render: extraConfig may not set them (it is laid over them)."""
HYBRID_CACHE_FLAG = "--disable-hybrid-kv-cache-manager"
HYBRID_CACHE_PREFIX = "--disable-hy"
"""vLLM 0.33's shortest unambiguous abbreviation of HYBRID_CACHE_FLAG (`--disable-h` also prefixes
`--disable-hc-sp`); argparse accepts every longer one."""


def object_rule(fn: ObjectRule) -> ObjectRule:
    OBJECT_RULES.append(fn)
    return fn


def _vllm_pools(spec: DisaggDeploymentSpec) -> Iterator[PoolName]:
    for role in POOLS:
        if pool_of(spec, role).custom_container is None:
            yield role


# -- settings that would be silently replaced --------------------------------------------------------------------


@object_rule
def operator_labels_are_not_set_by_hand(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    places = [(f"spec.{role}.podLabels", pool_of(spec, role).pod_labels) for role in POOLS]
    places.append(("spec.frontend.service.labels", spec.frontend.service.labels))
    for path, labels in places:
        for key in labels:
            if key in OPERATOR_LABEL_KEYS or key.startswith("leaderworkerset.sigs.k8s.io/"):
                yield Problem(
                    f"{path}.{key}",
                    "is set by the operator (or LeaderWorkerSet), which selects pods by it, so this value would be "
                    "replaced",
                    "remove it, or use a label key of your own",
                )
            elif key == LABEL_PAIRING_REVISION and path.endswith(".podLabels"):
                yield Problem(
                    f"{path}.{key}",
                    "is set by the operator: the frontend pairs only engines of one pairing revision (D91), so this "
                    "value would be replaced",
                    "remove it, or use a label key of your own",
                )
    for role in POOLS:
        for key in pool_of(spec, role).pod_annotations:
            if key in CONTRACT_ANNOTATIONS:
                yield Problem(
                    f"spec.{role}.podAnnotations.{key}",
                    "is decided by the operator: the frontend reads engines' ids, ports, parallel sizes and "
                    "pairing generation from these annotations (frontend/contract.py), so a value here would be "
                    "replaced or mislead the frontend",
                    "remove it, or use an annotation key of your own",
                )


@object_rule
def speculative_extra_config_leaves_the_fields_alone(
    spec: DisaggDeploymentSpec, family: ResolvedFamily
) -> Iterator[Problem]:
    for path, settings in _engine_sources(spec):
        speculative = settings.speculative
        if speculative is None:
            continue
        for key in speculative.extra_config:
            if key in SPECULATIVE_FIELDS:
                yield Problem(
                    f"{path}.speculative.extraConfig.{key}",
                    f"would override speculative.{SPECULATIVE_FIELDS[key]} (and escape the rule that both pools use "
                    "the same method and draft model)",
                    f"remove it and set speculative.{SPECULATIVE_FIELDS[key]} instead",
                )


def _engine_sources(spec: DisaggDeploymentSpec) -> Iterator[tuple[str, EngineSettings]]:
    yield "spec.engine", spec.engine
    for role in POOLS:
        yield f"spec.{role}.engine", pool_of(spec, role).engine


def flag_name(arg: str) -> str:
    """The option an argument sets, as vLLM's parser reads it: `--a_b=1` is `--a-b`."""
    flag = arg.split("=", 1)[0]
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


@object_rule
def hybrid_cache_flag_is_not_abbreviated(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if family != "hybrid-ssm":
        return
    for path, settings in _engine_sources(spec):
        for index, arg in enumerate(settings.extra_args):
            flag = flag_name(arg)
            if arg.split("=", 1)[0] == HYBRID_CACHE_FLAG:
                continue  # spelled out: rules.hybrid_ssm_requirements reports it
            if flag.startswith(HYBRID_CACHE_PREFIX) and HYBRID_CACHE_FLAG.startswith(flag):
                yield Problem(
                    f"{path}.extraArgs[{index}]",
                    f"{arg.split('=', 1)[0]} is read by vLLM as {HYBRID_CACHE_FLAG}, and hybrid SSM models "
                    "require the hybrid KV cache manager",
                    "remove it",
                )


@object_rule
def resources_set_by_fields_are_not_extra(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    network = spec.transfer.network
    for role in POOLS:
        resources = pool_of(spec, role).resources
        owned = {
            "cpu": f"spec.{role}.resources.cpu",
            "memory": f"spec.{role}.resources.memory (the operator adds the pinned KV memory to it)",
            resources.gpu_resource_name: f"the parallelism of spec.{role} (GPUs per pod)",
        }
        if network.rdma is not None:
            owned[network.rdma.resource_name] = "spec.transfer.network.rdma.count"
        for name in resources.extra:
            target = owned.get(name)
            if target is None and network.hugepages is not None and hugepage_size(name) is not None:
                target = "spec.transfer.network.hugepages"
            if target is not None:
                yield Problem(
                    f"spec.{role}.resources.extra.{name}",
                    f"{name} is set by {target}; this entry would replace it",
                    "remove it from extra and use that field",
                )


@object_rule
def custom_engines_run_one_pod_per_replica(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    if spec.decode.custom_container is not None and spec.decode.nodes_per_replica > 1:
        yield Problem(
            "spec.decode.nodesPerReplica",
            "a custom decode container runs as one pod per replica, so this would give it one pod with "
            f"1/{spec.decode.nodes_per_replica} of the replica's GPUs",
            "set nodesPerReplica to 1 (with gpusPerNode the GPUs of one pod), or run vLLM on the decode pool",
        )


@object_rule
def lmcache_transfer_has_no_mooncake_store(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    store = spec.kv_cache.store
    if spec.transfer.connector == "lmcache" and store is not None and store.type == "mooncake":
        yield Problem(
            "spec.kvCache.store.type",
            "connector lmcache moves KV through an LMCache server, and one DisaggDeployment runs one KV-store "
            "daemon: with a Mooncake store the LMCache server would not be deployed",
            "use store type lmcache (the same server then also serves as the shared tier), no store, or a "
            "connector other than lmcache",
        )


# -- ports ----------------------------------------------------------------------------------------------------


def engine_port_ranges(spec: DisaggDeploymentSpec, role: PoolName) -> list[tuple[str, int, int]]:
    """The ports one vLLM engine pod of the pool listens on, as (what, first, last): its HTTP port and the
    connector's listeners."""
    transfer = resolve_transfer(spec.transfer)
    pool = pool_of(spec, role)
    ranges: list[tuple[str, int, int]] = [("the engine HTTP port", ENGINE_HTTP_PORT, ENGINE_HTTP_PORT)]
    if runs_nixl(transfer, role):
        # The side channel binds base + global data-parallel rank, so a pod hosting ranks [start, start + local)
        # uses ports up to base + dataParallel - 1.
        base = transfer.nixl.side_channel_port
        ranges.append(("spec.transfer.nixl.sideChannelPort", base, base + pool.data_parallel - 1))
    if transfer.connector == "mooncake" and role == "prefill":
        port = transfer.mooncake.bootstrap_port
        ranges.append(("spec.transfer.mooncake.bootstrapPort", port, port))
    if transfer.connector == "moriio":
        moriio = transfer.moriio
        span = pool_layout(pool).ranks_per_pod - 1 + pool.tensor_parallel - 1
        ranges.append(("spec.transfer.moriio.handshakePort", moriio.handshake_port, moriio.handshake_port + span))
        ranges.append(("spec.transfer.moriio.notifyPort", moriio.notify_port, moriio.notify_port + span))
    return ranges


@object_rule
def ports_fit_and_differ(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    transfer = resolve_transfer(spec.transfer)
    for role in _vllm_pools(spec):
        pool = pool_of(spec, role)
        if runs_nixl(transfer, role):
            base = transfer.nixl.side_channel_port
            last = base + pool.data_parallel - 1
            if last > MAX_PORT:
                yield Problem(
                    "spec.transfer.nixl.sideChannelPort",
                    f"data-parallel rank r of the {role} pool listens on {base} + r, up to {last}, above {MAX_PORT}",
                    f"use a base port of at most {MAX_PORT - pool.data_parallel + 1}",
                )
        if transfer.connector == "moriio":
            span = pool_layout(pool).ranks_per_pod - 1 + pool.tensor_parallel - 1
            for field, base in (
                ("handshakePort", transfer.moriio.handshake_port),
                ("notifyPort", transfer.moriio.notify_port),
            ):
                if base + span > MAX_PORT:
                    yield Problem(
                        f"spec.transfer.moriio.{field}",
                        f"the {role} pool's ranks listen on {base} up to {base + span}, above {MAX_PORT}",
                        f"use a base port of at most {MAX_PORT - span}",
                    )
    if spec.decode.custom_container is not None:
        yield from _custom_ports("spec.decode.customContainer", spec.decode.custom_container, {})
    router = spec.frontend.router
    kind = router_kind(spec)
    if router.custom_container is not None:
        yield from _custom_ports("spec.frontend.router.customContainer", router.custom_container, {})
    elif kind is not None:
        taken = {router.port: "spec.frontend.router.port"}
        if kind == "disagg-frontend":
            # The admin API (probes, drains, pairs) must stay off the user-facing Service, which maps `port`.
            others = [("spec.frontend.router.adminPort", router.admin_port)]
        else:
            others = [("spec.frontend.router.metricsPort", router.metrics_port)]
            if transfer.connector == "moriio":
                others.append(("spec.transfer.moriio.proxyPingPort", transfer.moriio.proxy_ping_port))
        yield from _distinct(taken, others, "router")
    store = mooncake_store(spec)
    if store is not None:
        taken = {store.master_port: "spec.kvCache.store.mooncake.masterPort"}
        yield from _distinct(
            taken, [("spec.kvCache.store.mooncake.metricsPort", store.metrics_port)], "Mooncake master"
        )
    yield from _node_daemon_ports(spec)


def _node_daemon_ports(spec: DisaggDeploymentSpec) -> Iterator[Problem]:
    """The per-node KV daemon (D94) listens on ports of its node (host network): its own ports must differ, and
    engines on the host network of the same nodes must not listen on them."""
    store = mooncake_store(spec)
    pegaflow = pegaflow_store(spec)
    daemon: list[tuple[str, int]] = []
    if store is not None and store.mode == "standalone":
        client = store.node_client()
        path = "spec.kvCache.store.mooncake.client"
        daemon = [(f"{path}.port", client.port), (f"{path}.segmentPort", client.segment_port)]
        what = "Mooncake client"
    elif pegaflow is not None:
        path = "spec.kvCache.store.pegaflow.server"
        daemon = [(f"{path}.port", pegaflow.server.port), (f"{path}.httpPort", pegaflow.server.http_port)]
        what = "PegaFlow server"
    if not daemon:
        return
    first_path, first_port = daemon[0]
    yield from _distinct({first_port: first_path}, daemon[1:], what)
    kv = spec.kv_cache.store
    if not spec.transfer.network.host_network or kv is None:
        return
    for role in _vllm_pools(spec):
        if role not in kv.pools:
            continue
        for path, port in daemon:
            for name, low, high in engine_port_ranges(spec, role):
                if low <= port <= high:
                    yield Problem(
                        path,
                        f"port {port} of the node is also {name} of the {role} engines, which run on the host "
                        "network of the same nodes",
                        "choose a port of its own",
                    )


def _distinct(taken: dict[int, str], ports: list[tuple[str, int]], what: str) -> Iterator[Problem]:
    for path, port in ports:
        if port in taken:
            yield Problem(path, f"port {port} is also {taken[port]} of the {what}", "choose a port of its own")
        else:
            taken[port] = path


def _custom_ports(path: str, custom: CustomContainer, taken: dict[int, str]) -> Iterator[Problem]:
    taken = {**taken, custom.port: f"{path}.port"}
    for name, port in custom.extra_ports.items():
        problem = port_name_error(name)
        if problem is not None:
            yield Problem(f"{path}.extraPorts.{name}", f"the port name {problem}", "rename the port")
        if name == "http":
            yield Problem(f"{path}.extraPorts.http", "http names the container's main port", "rename this port")
        yield from _distinct(taken, [(f"{path}.extraPorts.{name}", port)], "container")


# -- environment variables ------------------------------------------------------------------------------------


def _env_problems(path: str, env: list[EnvVar], reserved: dict[str, str]) -> Iterator[Problem]:
    for index, var in enumerate(env):
        if var.name in reserved:
            yield Problem(f"{path}[{index}]", f"{var.name} is set by the operator ({reserved[var.name]})", "remove it")


def _storage_env(spec: DisaggDeploymentSpec) -> dict[str, str]:
    storage = spec.model.storage
    names = {"HF_HOME": "spec.model.storage.mountPath"}
    if storage.offline:
        names["HF_HUB_OFFLINE"] = "spec.model.storage.offline"
    if storage.hugging_face is not None and storage.hugging_face.token_secret_ref is not None:
        names["HF_TOKEN"] = "spec.model.storage.huggingFace.tokenSecretRef"
    return names


@object_rule
def env_names_are_set_once(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    """Containers key their env by name, so a name given twice makes server-side apply refuse the object. The
    engines' own env is checked against the operator's by rules.owned_engine_env; the rest is checked here."""
    if family == "hybrid-ssm":
        for path, settings in _engine_sources(spec):
            for index, var in enumerate(settings.env):
                if var.name == "VLLM_SSM_CONV_STATE_LAYOUT" and var.value == "DS":
                    yield Problem(
                        f"{path}.env[{index}]",
                        "VLLM_SSM_CONV_STATE_LAYOUT is set to DS by the operator for hybrid SSM models",
                        "remove it",
                    )
    transfer = resolve_transfer(spec.transfer)
    if transfer.connector == "mooncake" and transfer.mooncake.nvidia_peermem is False:
        for path, settings in _engine_sources(spec):
            for index, var in enumerate(settings.env):
                if var.name == "WITH_NVIDIA_PEERMEM":
                    yield Problem(
                        f"{path}.env[{index}]",
                        "WITH_NVIDIA_PEERMEM is set by spec.transfer.mooncake.nvidiaPeermem",
                        "keep only one: remove the variable or the field",
                    )
    base = {
        "POD_NAME": "the pod's name, which engine ids derive from (D92)",
        "POD_IP": "the pod IP",
        "VLLM_HOST_IP": "the pod IP",
        "PYTHONHASHSEED": "spec.engine.pythonHashSeed",
        "DISAGG_PREFILL_HOST": "the prefill pool's Service",
        "DISAGG_DECODE_HOST": "the decode pool's Service",
        **_storage_env(spec),
    }
    network = spec.transfer.network
    for name, value, field in (
        ("UCX_TLS", network.ucx_tls, "spec.transfer.network.ucxTls"),
        ("UCX_NET_DEVICES", network.ucx_net_devices, "spec.transfer.network.ucxNetDevices"),
        ("FI_PROVIDER", network.fi_provider, "spec.transfer.network.fiProvider"),
    ):
        if value is not None:
            base[name] = field
    if spec.decode.custom_container is not None:
        yield from _env_problems("spec.decode.customContainer.env", spec.decode.custom_container.env, base)
    router = spec.frontend.router
    router_env = dict.fromkeys(ROUTER_ENV, "the router's discovery")
    if router.custom_container is not None:
        yield from _env_problems("spec.frontend.router.customContainer.env", router.custom_container.env, router_env)
        own = {var.name: "spec.frontend.router.customContainer.env" for var in router.custom_container.env}
        yield from _env_problems("spec.frontend.router.env", router.env, {**router_env, **own})
    else:
        yield from _env_problems("spec.frontend.router.env", router.env, router_env)
    yield from _env_problems("spec.frontend.render.env", spec.frontend.render.env, _storage_env(spec))


# -- resources ------------------------------------------------------------------------------------------------


@object_rule
def resources_are_what_containers_may_request(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    network = spec.transfer.network
    if network.rdma is not None:
        yield from _device_resource(
            "spec.transfer.network.rdma.resourceName",
            network.rdma.resource_name,
            "RDMA devices",
            "such as rdma/ib or vpc.amazonaws.com/efa",
            {},
        )
    hugepages = network.hugepages
    if hugepages is not None:
        yield from _hugepages_amount(
            "spec.transfer.network.hugepages.size", f"hugepages-{hugepages.page_size}", hugepages.size
        )
    for role in POOLS:
        resources = pool_of(spec, role).resources
        path = f"spec.{role}.resources"
        yield from _device_resource(
            f"{path}.gpuResourceName",
            resources.gpu_resource_name,
            "GPUs",
            "such as nvidia.com/gpu or amd.com/gpu",
            {"cpu": f"{path}.cpu", "memory": f"{path}.memory"},
        )
        pages = hugepages is not None
        for name, amount in resources.extra.items():
            problem = container_resource_error(name)
            if problem is not None:
                yield Problem(f"{path}.extra.{name}", f"the resource name {problem}", _RESOURCE_FIX)
                continue
            if is_extended_resource(name) and parse_quantity(amount) % 1:
                yield Problem(f"{path}.extra.{name}", f"{name} counts whole devices", "use a whole number")
            if hugepage_size(name) is not None:
                pages = True
                yield from _hugepages_amount(f"{path}.extra.{name}", name, amount)
        memory = pod_memory(spec, role)
        if pages and resources.cpu is None and memory.request is None:
            yield Problem(
                f"{path}",
                "huge pages need a CPU or memory request in the same container (the API server refuses the pod)",
                f"set {path}.cpu or {path}.memory",
            )
    pegaflow = pegaflow_store(spec)
    if pegaflow is not None and pegaflow.server.hugepages:
        # The server's pool becomes a huge-page request of the same size (plan/stores.py).
        page = hugepages.page_size if hugepages is not None else DEFAULT_HUGEPAGE_SIZE
        yield from _hugepages_amount(
            "spec.kvCache.store.pegaflow.server.poolSize", f"hugepages-{page}", pegaflow.server.pool_size
        )
    for path, given in (
        ("spec.frontend.router.resources", spec.frontend.router.resources),
        ("spec.frontend.render.resources", spec.frontend.render.resources),
    ):
        yield from _requirements(path, given)


_RESOURCE_FIX = "use cpu, memory, ephemeral-storage, hugepages-<size>, or a vendor resource such as nvidia.com/gpu"


def _device_resource(path: str, name: str, devices: str, examples: str, fields: dict[str, str]) -> Iterator[Problem]:
    """A field that names the extended resource granting devices (gpuResourceName, rdma.resourceName): the fix is
    the device plugin's resource name, never a standard resource, and a standard one the user meant has its own
    field (`fields`)."""
    problem = extended_resource_error(name)
    if problem is None:
        return
    field = path.rpartition(".")[2]
    fix = f"set {field} to the extended resource your device plugin advertises for {devices}, {examples}"
    if name in fields:
        fix += f"; the pod's {name} is set by {fields[name]}"
    yield Problem(
        path, f"{field} must name the extended resource that grants {devices} to a pod; {name!r} {problem}", fix
    )


def _hugepages_amount(path: str, name: str, amount: int | str) -> Iterator[Problem]:
    size = hugepage_size(name)
    value = parse_quantity(amount)
    if size is not None and (value <= 0 or value % size):
        yield Problem(
            path,
            f"{amount} is not a positive whole number of {name.removeprefix('hugepages-')} pages",
            f"use a multiple of {name.removeprefix('hugepages-')}",
        )


def _requirements(path: str, given: ResourceRequirements) -> Iterator[Problem]:
    for side, entries in (("requests", given.requests), ("limits", given.limits)):
        for name, amount in entries.items():
            problem = container_resource_error(name)
            if problem is not None:
                yield Problem(f"{path}.{side}.{name}", f"the resource name {problem}", _RESOURCE_FIX)
            elif is_extended_resource(name) and parse_quantity(amount) % 1:
                yield Problem(f"{path}.{side}.{name}", f"{name} counts whole devices", "use a whole number")
            elif hugepage_size(name) is not None:
                yield from _hugepages_amount(f"{path}.{side}.{name}", name, amount)
    for name, amount in given.requests.items():
        limit = given.limits.get(name)
        fixed = is_extended_resource(name) or hugepage_size(name) is not None
        if fixed and limit is None:
            yield Problem(
                f"{path}.limits.{name}",
                f"{name} cannot be overcommitted, so a request needs a limit",
                f"set limits.{name} equal to the request",
            )
        elif fixed and limit is not None and parse_quantity(limit) != parse_quantity(amount):
            yield Problem(f"{path}.requests.{name}", f"{name} cannot be overcommitted", "make request and limit equal")
        elif limit is not None and parse_quantity(amount) > parse_quantity(limit):
            yield Problem(
                f"{path}.requests.{name}",
                f"the request {amount} is above the limit {limit}",
                "lower it or raise the limit",
            )
    names = set(given.requests) | set(given.limits)
    if any(hugepage_size(name) is not None for name in names) and not names & {"cpu", "memory"}:
        yield Problem(path, "huge pages need a CPU or memory request in the same container", "request cpu or memory")


# -- volumes and mounts ---------------------------------------------------------------------------------------


@object_rule
def mount_paths_differ_and_paths_stay_inside(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    storage = spec.model.storage
    if storage.host_path is not None and backstep_error(storage.host_path.path):
        yield Problem("spec.model.storage.hostPath.path", "must not contain '..'", "write the path without '..'")
    claim = storage.persistent_volume_claim
    if claim is not None and claim.sub_path is not None:
        problem = sub_path_error(claim.sub_path)
        if problem is not None:
            yield Problem(
                "spec.model.storage.persistentVolumeClaim.subPath",
                problem,
                "write a path inside the volume, e.g. models/qwen3",
            )
    disk = spec.kv_cache.disk
    if disk is not None and disk.volume.host_path is not None and backstep_error(disk.volume.host_path.path):
        yield Problem("spec.kvCache.disk.volume.hostPath.path", "must not contain '..'", "write the path without '..'")
    store = mooncake_store(spec)
    pegaflow = pegaflow_store(spec)
    ssd_caches = [
        ("spec.kvCache.store.mooncake.client.offload.path", store.node_client().offload if store else None),
        ("spec.kvCache.store.pegaflow.server.ssdCache.path", pegaflow.server.ssd_cache if pegaflow else None),
    ]
    for path, cache in ssd_caches:
        if cache is not None and backstep_error(cache.path):
            yield Problem(path, "must not contain '..'", "write the path without '..'")
    model_path = storage.mount_path.rstrip("/")
    fixed = dict(OPERATOR_MOUNT_PATHS)
    if model_path in fixed:
        yield Problem(
            "spec.model.storage.mountPath",
            f"{model_path} is where the operator mounts {fixed[model_path]}",
            "choose another path, such as /models",
        )
    if disk is not None:
        disk_path = disk.mount_path.rstrip("/")
        if disk_path == model_path:
            yield Problem(
                "spec.kvCache.disk.mountPath",
                f"{disk_path} is also spec.model.storage.mountPath",
                "mount the disk tier elsewhere, such as /kv-cache",
            )
        elif disk_path in fixed:
            yield Problem(
                "spec.kvCache.disk.mountPath",
                f"{disk_path} is where the operator mounts {fixed[disk_path]}",
                "choose another path, such as /kv-cache",
            )


# -- rolling updates ------------------------------------------------------------------------------------------


@object_rule
def rollouts_are_valid(spec: DisaggDeploymentSpec, family: ResolvedFamily) -> Iterator[Problem]:
    gating = may_gate_pools(spec)
    for role in POOLS:
        pool = pool_of(spec, role)
        surge, unavailable = effective_rollout(pool, role)
        path = f"spec.{role}.rollout"
        values = {}
        for field, value in (("maxSurge", surge), ("maxUnavailable", unavailable)):
            amount = _count_or_percent(value)
            if amount is None:
                yield Problem(f"{path}.{field}", f"{value!r} is not a count or a percentage", "write 1 or 25%")
                continue
            values[field] = amount
            if field == "maxUnavailable" and isinstance(value, str) and amount > 100:
                yield Problem(f"{path}.{field}", f"{value} is more than all replicas", "use at most 100%")
        which = "maxSurge" if pool.rollout.max_surge is not None else "maxUnavailable"
        if values.get("maxSurge") == 0 and values.get("maxUnavailable") == 0:
            yield Problem(
                f"{path}.{which}",
                "maxSurge and maxUnavailable are both 0 (counting the pool's defaults), so an update could never "
                "replace a pod",
                "allow at least one: maxSurge 1 or maxUnavailable 1",
            )
        elif gating and not pool_layout(pool).multi_node and len(values) == 2:
            gated = [_count_or_percent(value) for value in effective_rollout(pool, role, gated=True)]
            if gated == [0, 0]:
                yield Problem(
                    f"{path}.{which}",
                    "maxSurge and maxUnavailable are both 0 (counting the defaults of pools behind the serving "
                    "readiness gate, maxSurge 100% and maxUnavailable 0), so an update could never replace a pod",
                    "allow at least one: leave maxSurge unset, or also set maxUnavailable 1; or set "
                    "spec.serving.check.mode Report",
                )


def _count_or_percent(value: IntOrPercent) -> int | None:
    if isinstance(value, int):
        return value if value >= 0 else None
    return int(value[:-1]) if _PERCENT.fullmatch(value) else None
