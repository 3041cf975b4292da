"""KV-store daemons owned by the DisaggDeployment: the Mooncake master, the LMCache server or the PegaFlow
metaserver (`<name>-kv-store`), and the per-node daemons (`<name>-kv-node`, a DaemonSet): a standalone Mooncake
store's `mooncake_client` or PegaFlow's `pegaflow-server`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from disagg.api.frontend import PodPlacement
from disagg.api.kvcache import DEFAULT_HUGEPAGE_SIZE, MooncakeStore, PegaflowStore
from disagg.api.resolve import LmcacheServer, ResolvedDeployment, ResolvedPool
from disagg.api.transfer import NetworkSettings
from disagg.api.units import format_binary_quantity, parse_quantity
from disagg.names import child_name, common_labels, kv_config_name, selector_labels

from .connectors.base import HOST_IP_ENV, KV_CONFIG_DIR, host_ip_env, literal_env
from .model import ContainerPlan, PodPlan, ServicePlan, WorkloadPlan
from .pod import tolerations

SSD_MOUNT = "/mnt/kv-ssd"
DAEMON_MEMORY_MARGIN = 1 << 30
OFFLOAD_STAGING_BYTES = 1280 << 20
"""mooncake_client's SSD staging buffer (MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES): 0.3.13's own default, which it
allocates at start whenever offload is on (a pod limited to segment + margin was OOM-killed on the real node)."""
"""Memory a per-node daemon needs beyond the pool it pins (its own process, buffers, index)."""


MOONCAKE_TENANTS_FILE = "mooncake-tenants.yaml"
TENANT_QUOTA = "1048576GB"
"""The tenant's quota in its own master: 1 PiB, no limit in practice. The master belongs to one DisaggDeployment
(D94), so the quota only has to admit its one tenant; Mooncake has no unlimited value."""


@dataclass(frozen=True)
class StorePlan:
    workload: WorkloadPlan
    service: ServicePlan
    config_files: dict[str, str] = field(default_factory=dict)
    """Files the store's pod reads from the KV ConfigMap."""


def plan_store(
    deployment: str,
    mooncake: MooncakeStore | None,
    lmcache: LmcacheServer | None,
    engine_image: str,
    pegaflow: PegaflowStore | None = None,
    placement: dict[str, Any] | None = None,
) -> StorePlan | None:
    """One KV-store daemon per DisaggDeployment: the Mooncake master when the store tier is Mooncake, the
    PegaFlow metaserver for PegaFlow, else the LMCache server when anything uses LMCache. `placement` (node
    selector and tolerations) puts it where the pools that use it run."""
    plan: StorePlan | None = None
    if mooncake is not None:
        plan = _mooncake_master(deployment, mooncake, engine_image)
    elif pegaflow is not None:
        plan = _pegaflow_metaserver(deployment, pegaflow) if pegaflow.metaserver.enabled else None
    elif lmcache is not None:
        plan = _lmcache_server(deployment, lmcache.image, lmcache.port, lmcache.size)
    if plan is not None and placement:
        pod = plan.workload.pod
        placed = PodPlan(pod.labels, pod.annotations, pod.containers, pod.volumes, {**pod.spec_extra, **placement})
        plan = replace(plan, workload=replace(plan.workload, pod=placed))
    return plan


def store_placement(deployment: ResolvedDeployment) -> dict[str, Any]:
    """The common node labels and every toleration of the pools that use the store (or of both pools)."""
    store = deployment.kv_cache.store
    pools = [pool for pool in deployment.pools if store is None or pool.role in store.pools]
    return _daemon_placement(PodPlacement(), pools)


def _mooncake_master(deployment: str, store: MooncakeStore, engine_image: str) -> StorePlan:
    args = [
        f"--rpc_port={store.master_port}",
        "--rpc_address=0.0.0.0",
        f"--metrics_port={store.metrics_port}",
        "--metrics_host=0.0.0.0",
    ]
    if store.mode == "standalone" and store.node_client().offload is not None:
        args.append("--enable_offload=true")  # must match the clients' and the engines' enable_offload
    files: dict[str, str] = {}
    mounts: list[dict[str, Any]] = []
    if store.tenant is not None:
        # Strict tenant namespaces; mooncake_master then refuses to start without a quota policy (a YAML file with
        # every tenant it admits), which it reads at start (a read-only mount is enough).
        files[MOONCAKE_TENANTS_FILE] = mooncake_tenants_policy(store.tenant)
        args += [
            "--enable_multi_tenants=true",
            "--tenant_quota_connector_type=file",
            f"--tenant_quota_connector_uri={KV_CONFIG_DIR}/{MOONCAKE_TENANTS_FILE}",
        ]
        mounts.append({"name": "kv-config", "mountPath": KV_CONFIG_DIR, "readOnly": True})
    ports = [
        {"name": "rpc", "containerPort": store.master_port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": store.metrics_port, "protocol": "TCP"},
    ]
    container = ContainerPlan(
        name="mooncake-master",
        image=store.master_image or engine_image,
        image_pull_policy="IfNotPresent",
        command=["mooncake_master"],
        args=args,
        ports=ports,
        # Metadata RPCs only: the KV bytes move between engines and segments, never through the master.
        resources={"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        probes=_tcp_probes("rpc"),
        volume_mounts=mounts,
    )
    plan = _store(deployment, container, "mooncake-master")
    if not files:
        return plan
    pod = plan.workload.pod
    volumes = [*pod.volumes, {"name": "kv-config", "configMap": {"name": kv_config_name(deployment)}}]
    with_volume = PodPlan(pod.labels, pod.annotations, pod.containers, volumes, pod.spec_extra)
    return replace(plan, workload=replace(plan.workload, pod=with_volume), config_files=files)


def mooncake_tenants_policy(tenant: str) -> str:
    """mooncake_master's tenant quota policy (version 1: a list of tenants with their quotas)."""
    return f'version: 1\ntenants:\n  - name: "{tenant}"\n    quota: {TENANT_QUOTA}\n'


def _pegaflow_metaserver(deployment: str, store: PegaflowStore) -> StorePlan:
    port = store.metaserver.port
    container = ContainerPlan(
        name="pegaflow-metaserver",
        image=store.metaserver.image or store.server.image,
        image_pull_policy="IfNotPresent",
        command=["pegaflow-metaserver"],
        args=["--addr", f"0.0.0.0:{port}"],
        ports=[{"name": "grpc", "containerPort": port, "protocol": "TCP"}],
        resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        probes=_tcp_probes("grpc"),
    )
    return _store(deployment, container, "pegaflow-metaserver")


def _lmcache_server(deployment: str, image: str, port: int, size: str | int) -> StorePlan:
    memory = format_binary_quantity(parse_quantity(size))
    container = ContainerPlan(
        name="lmcache-server",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["lmcache_server"],
        args=["0.0.0.0", str(port), "cpu"],
        ports=[{"name": "lmcache", "containerPort": port, "protocol": "TCP"}],
        resources={"requests": {"cpu": "2", "memory": memory}, "limits": {"memory": memory}},
        probes=_tcp_probes("lmcache"),
    )
    return _store(deployment, container, "lmcache-server")


def _store(deployment: str, container: ContainerPlan, app_name: str) -> StorePlan:
    name = child_name(deployment, "kv-store")
    labels = common_labels(deployment, "kv-store", app_name=app_name)
    no_token = {"automountServiceAccountToken": False}  # the store daemons never call the Kubernetes API (D77)
    pod = PodPlan(labels=labels, annotations={}, containers=[container], spec_extra=no_token)
    workload = WorkloadPlan(
        "Deployment", name, "kv-store", labels, selector_labels(deployment, "kv-store"), 1, pod, {"type": "Recreate"}
    )
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in container.ports
    ]
    return StorePlan(workload, ServicePlan(name, labels, selector_labels(deployment, "kv-store"), ports))


def _tcp_probes(port: str) -> dict[str, object]:
    socket = {"tcpSocket": {"port": port}}
    return {
        "livenessProbe": {**socket, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {**socket, "periodSeconds": 5, "failureThreshold": 2},
    }


# ---- per-node daemons --------------------------------------------------------------------------------------------


def plan_node_daemon(deployment: ResolvedDeployment) -> WorkloadPlan | None:
    """The per-node KV daemon of a standalone Mooncake store or of PegaFlow, on the nodes of the pools using it."""
    store = deployment.kv_cache.store
    if store is None:
        return None
    pools = [pool for pool in deployment.pools if pool.role in store.pools]
    mooncake = deployment.mooncake_store
    if mooncake is not None and mooncake.mode == "standalone":
        client = mooncake.node_client()
        image = client.image or mooncake.master_image or deployment.shared_image
        container, volumes = _mooncake_client(deployment.name, mooncake, image, deployment.transfer.network)
        return _daemon(deployment.name, container, "mooncake-client", client.placement, pools, False, volumes)
    pegaflow = deployment.pegaflow
    if pegaflow is not None:
        container, volumes = _pegaflow_server(deployment.name, pegaflow, deployment.transfer.network)
        return _daemon(deployment.name, container, "pegaflow-server", pegaflow.server.placement, pools, True, volumes)
    return None


def _ssd(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    volume = {"name": "kv-ssd", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
    return volume, {"name": "kv-ssd", "mountPath": SSD_MOUNT}


def _daemon_resources(pinned: int, network: NetworkSettings, hugepages: bool = False) -> dict[str, Any]:
    memory = format_binary_quantity(pinned + DAEMON_MEMORY_MARGIN)
    requests = {"cpu": "1", "memory": memory}
    limits = {"memory": memory}
    if hugepages:
        page = network.hugepages.page_size if network.hugepages else DEFAULT_HUGEPAGE_SIZE
        requests[f"hugepages-{page}"] = limits[f"hugepages-{page}"] = format_binary_quantity(pinned)
        requests["memory"] = limits["memory"] = format_binary_quantity(DAEMON_MEMORY_MARGIN)
    if network.rdma is not None:
        requests[network.rdma.resource_name] = limits[network.rdma.resource_name] = str(network.rdma.count)
    return {"requests": requests, "limits": limits}


def _mooncake_client(
    deployment: str, store: MooncakeStore, image: str, network: NetworkSettings
) -> tuple[ContainerPlan, list[dict[str, Any]]]:
    client = store.node_client()
    segment = int(parse_quantity(client.segment_size))
    # Flags of mooncake_client 0.3.13 (--helpfull). A host with a port names the segment host:port; a bare host
    # would get a random transfer-engine port, which no engine could name as its preferred segment.
    args = [
        f"--host=$({HOST_IP_ENV}):{client.segment_port}",
        f"--port={client.port}",
        f"--global_segment_size={segment}",
        f"--master_server_address={child_name(deployment, 'kv-store')}:{store.master_port}",
        "--metadata_server=P2PHANDSHAKE",
        f"--protocol={store.protocol}",
    ]
    if store.devices:
        args.append(f"--device_names={','.join(store.devices)}")
    if store.tenant is not None:
        args.append(f"--tenant_id={store.tenant}")
    env = [host_ip_env()]
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    memory = segment
    if client.offload is not None:
        args.append("--enable_offload=true")
        env.append(literal_env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", SSD_MOUNT))
        # The SSD tier stages through a buffer the client allocates at start; named so the pod's memory counts it.
        env.append(literal_env("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(OFFLOAD_STAGING_BYTES)))
        memory += OFFLOAD_STAGING_BYTES
        if client.offload.size is not None:
            limit = str(int(parse_quantity(client.offload.size)))
            env.append(literal_env("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", limit))
        volume, mount = _ssd(client.offload.path)
        volumes.append(volume)
        mounts.append(mount)
    container = ContainerPlan(
        name="mooncake-client",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["mooncake_client"],
        args=args,
        env=env,
        ports=[
            {"name": "rpc", "containerPort": client.port, "protocol": "TCP"},
            {"name": "segment", "containerPort": client.segment_port, "protocol": "TCP"},
        ],
        resources=_daemon_resources(memory, network),
        volume_mounts=mounts,
        probes=_tcp_probes("rpc"),
        security_context=_daemon_security(client.offload is not None),
    )
    return container, volumes


def _daemon_security(writes_the_node: bool) -> dict[str, Any]:
    """IPC_LOCK to pin the pool; root when it writes a directory of the node (a hostPath belongs to root)."""
    context: dict[str, Any] = {"capabilities": {"add": ["IPC_LOCK"]}}
    if writes_the_node:
        context["runAsUser"] = 0
    return context


def _pegaflow_server(
    deployment: str, store: PegaflowStore, network: NetworkSettings
) -> tuple[ContainerPlan, list[dict[str, Any]]]:
    server = store.server
    pool = int(parse_quantity(server.pool_size))
    args = [
        "--addr",
        f"$({HOST_IP_ENV}):{server.port}",
        "--http-addr",
        f"0.0.0.0:{server.http_port}",
        "--pool-size",
        _bytes_flag(pool),
    ]
    if server.hugepages:
        args.append("--use-hugepages")
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if server.ssd_cache is not None:
        args += ["--ssd-cache-path", f"{SSD_MOUNT}/pegaflow.cache"]
        if server.ssd_cache.size is not None:
            args += ["--ssd-cache-capacity", _bytes_flag(int(parse_quantity(server.ssd_cache.size)))]
        volume, mount = _ssd(server.ssd_cache.path)
        volumes.append(volume)
        mounts.append(mount)
    if server.nics:
        args += ["--nics", *server.nics]
    if store.metaserver.enabled:
        args += ["--metaserver-addr", f"http://{child_name(deployment, 'kv-store')}:{store.metaserver.port}"]
    container = ContainerPlan(
        name="pegaflow-server",
        image=server.image,
        image_pull_policy="IfNotPresent",
        command=["pegaflow-server"],
        args=args,
        # The server sees every GPU of its node without requesting one (the engines hold them).
        env=[
            host_ip_env(),
            literal_env("NVIDIA_VISIBLE_DEVICES", "all"),
            literal_env("PEGAFLOW_HOST_IP", f"$({HOST_IP_ENV})"),
        ],
        ports=[
            {"name": "grpc", "containerPort": server.port, "protocol": "TCP"},
            {"name": "http", "containerPort": server.http_port, "protocol": "TCP"},
        ],
        resources=_daemon_resources(pool, network, hugepages=server.hugepages),
        volume_mounts=mounts,
        probes={
            "livenessProbe": {
                "httpGet": {"path": "/health", "port": "http"},
                "periodSeconds": 10,
                "failureThreshold": 3,
            },
            "readinessProbe": {
                "httpGet": {"path": "/health", "port": "http"},
                "periodSeconds": 5,
                "failureThreshold": 2,
            },
        },
        security_context={"capabilities": {"add": ["IPC_LOCK"]}},
    )
    return container, volumes


def _bytes_flag(size: int) -> str:
    """PegaFlow reads sizes as `30gb`; whole GiB where possible, else bytes."""
    return f"{size >> 30}gb" if size % (1 << 30) == 0 else f"{size}b"


def _daemon_placement(placement: PodPlacement, pools: list[ResolvedPool]) -> dict[str, Any]:
    """Where a per-node daemon runs: as asked, else the nodes the pools that use it select (their common node
    labels), with every toleration those pools carry."""
    extra: dict[str, Any] = {}
    if placement.node_selector or placement.tolerations:
        if placement.node_selector:
            extra["nodeSelector"] = dict(placement.node_selector)
        if placement.tolerations:
            extra["tolerations"] = tolerations(placement.tolerations)
        return extra
    selectors = [dict(pool.spec.scheduling.node_selector) for pool in pools]
    common = {k: v for k, v in selectors[0].items() if all(s.get(k) == v for s in selectors)} if selectors else {}
    if common:
        extra["nodeSelector"] = common
    seen: list[dict[str, Any]] = []
    for pool in pools:
        for toleration in tolerations(pool.spec.scheduling.tolerations):
            if toleration not in seen:
                seen.append(toleration)
    if seen:
        extra["tolerations"] = seen
    return extra


def _daemon(
    deployment: str,
    container: ContainerPlan,
    app_name: str,
    placement: PodPlacement,
    pools: list[ResolvedPool],
    host_ipc: bool,
    volumes: list[dict[str, Any]],
) -> WorkloadPlan:
    name = child_name(deployment, "kv-node")
    labels = common_labels(deployment, "kv-node", app_name=app_name)
    extra: dict[str, Any] = {
        # Its address is the node's: engines on the node reach it at status.hostIP, and its transfer engine
        # listens on ports of the node.
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "automountServiceAccountToken": False,  # the daemons never call the Kubernetes API (D77)
        **_daemon_placement(placement, pools),
    }
    if host_ipc:
        extra["hostIPC"] = True
    pod = PodPlan(labels=labels, annotations={}, containers=[container], volumes=volumes, spec_extra=extra)
    return WorkloadPlan(
        "DaemonSet",
        name,
        "kv-node",
        labels,
        selector_labels(deployment, "kv-node"),
        0,
        pod,
        {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
    )
