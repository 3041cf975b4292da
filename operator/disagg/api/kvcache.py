"""`spec.kvCache`: KV cache tiers beyond GPU memory (CPU, local disk, shared stores)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .cel import CelRule, at_most_one_of, with_cel
from .frontend import PodPlacement
from .types import Image, ObjectName, Port, Quantity
from .units import parse_quantity

PoolRole = Literal["prefill", "decode"]
PoolList = Annotated[list[PoolRole], Field(min_length=1, max_length=2)]


def _both_pools() -> list[PoolRole]:
    return ["prefill", "decode"]


class CpuTier(ApiModel):
    """Pinned host memory as a KV tier (vLLM OffloadingConnector)."""

    size: Quantity = Field(
        description="Host memory per engine (per data-parallel rank) for offloaded KV. The pod's memory request "
        "and limit grow by this amount for every engine in the pod."
    )
    pools: PoolList = Field(default_factory=_both_pools, description="Pools that get the tier.")
    eviction_policy: Literal["lru", "arc"] = Field(default="lru", description="Eviction policy of the tier.")


class EmptyDirVolume(ApiModel):
    size_limit: Quantity | None = Field(default=None, description="Size limit of the emptyDir.")


class PvcVolume(ApiModel):
    claim_name: ObjectName = Field(
        description="Existing PersistentVolumeClaim. A ReadWriteMany claim shares cached KV across engines."
    )


class HostPathVolume(ApiModel):
    path: Annotated[str, Field(min_length=2, max_length=1024, pattern=r"^/")] = Field(
        description="Absolute directory on the node, e.g. a local NVMe mount."
    )


class DiskVolume(ApiModel):
    """The volume behind the disk tier. Set at most one; with none, an emptyDir is used."""

    model_config = with_cel(
        CelRule(
            rule=at_most_one_of("emptyDir", "persistentVolumeClaim", "hostPath"),
            message="spec.kvCache.disk.volume: set only one of emptyDir, persistentVolumeClaim or hostPath",
        )
    )

    empty_dir: EmptyDirVolume | None = Field(default=None, description="Node-local scratch space (the default).")
    persistent_volume_claim: PvcVolume | None = Field(default=None, description="An existing claim.")
    host_path: HostPathVolume | None = Field(default=None, description="A directory of the node.")


class DiskTier(ApiModel):
    """A file-system tier behind the CPU tier (vLLM TieringOffloadingSpec with an fs secondary tier)."""

    mount_path: Annotated[str, Field(min_length=2, max_length=256, pattern=r"^/")] = Field(
        default="/kv-cache", description="Where the tier's volume is mounted in engine containers."
    )
    volume: DiskVolume = Field(default_factory=DiskVolume, description="The volume holding the tier.")
    pools: PoolList = Field(default_factory=_both_pools, description="Pools that get the tier.")


AbsolutePath = Annotated[str, Field(min_length=2, max_length=1024, pattern=r"^/")]
NicName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class SsdCache(ApiModel):
    """A directory on the node's local SSD (a hostPath), for a per-node daemon's disk tier."""

    path: AbsolutePath = Field(description="Directory on the node (created when missing), e.g. /mnt/nvme/kv.")
    size: Quantity | None = Field(default=None, description="How much of it the daemon may fill.")


class MooncakeClient(ApiModel):
    """The per-node owner of a standalone Mooncake store (mode standalone, as in the AgentX post): a
    `mooncake_client` DaemonSet `<name>-kv-node` that holds the node's CPU pool and SSD tier, while engines are
    pure requesters that put into and get from it. Host access: the client runs on the host network (its segment
    is named `<node IP>:<segmentPort>`, which engines on the node set as MOONCAKE_PREFERRED_SEGMENT, and its
    transfer engine listens on ports of the node), with IPC_LOCK to pin the pool, and the SSD tier is a hostPath: its
    namespace must allow privileged pods (Pod Security level privileged)."""

    segment_size: Quantity = Field(
        default="16Gi",
        description="Host memory the client contributes to the pool (its --global_segment_size); the pod's memory "
        "request and limit are this plus 1Gi, and plus the SSD tier's 1280Mi staging buffer with offload.",
    )
    port: Port = Field(default=50052, description="RPC port of the client's service on the node (--port).")
    segment_port: Port = Field(
        default=50053,
        description="Port of the client's transfer engine on the node: its segment is named <node IP>:<segmentPort> "
        "(--host=<node IP>:<segmentPort>), the name engines on the node put into (MOONCAKE_PREFERRED_SEGMENT). "
        "Without it Mooncake picks a random port and no engine could name the segment.",
    )
    offload: SsdCache | None = Field(
        default=None,
        description="SSD tier behind the client's memory (--enable_offload with MOONCAKE_OFFLOAD_FILE_STORAGE_PATH); "
        "the master and the engines get enable_offload too.",
    )
    image: Image | None = Field(
        default=None, description="Image with mooncake_client (pip mooncake-transfer-engine). Default: masterImage."
    )
    placement: PodPlacement = Field(
        default_factory=PodPlacement,
        description="Nodes the client runs on. Default: the nodes the pools that use the store select, with their "
        "tolerations.",
    )


class MooncakeStore(ApiModel):
    """A Mooncake distributed KV pool: a master (Deployment + Service) and engines that contribute memory
    (mode embedded), or a per-node client that owns the pool while engines only request (mode standalone)."""

    mode: Literal["embedded", "standalone"] = Field(
        default="embedded",
        description="embedded: every engine contributes globalSegmentSize to the pool in-process. standalone: a "
        "mooncake_client per node (client) owns the pool and the SSD tier; engines contribute nothing (vLLM's "
        "standalone-store mode) and put into the client on their node.",
    )
    # No schema defaults for client and globalSegmentSize: the API server would fill both into every store, and
    # each belongs to one mode only (the rules refuse the other mode's field when it is set).
    client: MooncakeClient | None = Field(
        default=None, description="The per-node client (mode standalone only; unset: the client's defaults)."
    )
    tenant: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")] | None = Field(
        default=None,
        description="Tenant of this deployment's keys (tenant_id): the master runs with strict tenant namespaces "
        "(--enable_multi_tenants, admitting this one tenant), so a client of the master under another tenant sees "
        "none of them. Default: Mooncake's tenant 'default' and no tenant namespaces.",
    )

    global_segment_size: Quantity | None = Field(
        default=None,
        description="Memory each engine contributes to the pool (global_segment_size; mode embedded only). "
        "Default: 4Gi.",
    )
    local_buffer_size: Quantity = Field(
        default="4Gi", description="Each engine's local transfer buffer (local_buffer_size)."
    )
    protocol: Literal["rdma", "tcp"] = Field(default="rdma", description="Transfer protocol of the store.")
    devices: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=32)] = Field(
        default_factory=list, description="RDMA devices for the store, e.g. [mlx5_0]. Empty means all."
    )
    save_decode_cache: bool = Field(
        default=False, description="Let decode engines also write their KV into the pool (save_decode_cache)."
    )
    master_image: Image | None = Field(
        default=None,
        description="Image that provides mooncake_master (pip package mooncake-transfer-engine). Default: the "
        "engine image.",
    )
    master_port: Port = Field(default=50051, description="RPC port of the Mooncake master.")
    metrics_port: Port = Field(default=9003, description="Metrics port of the Mooncake master.")

    def node_client(self) -> MooncakeClient:
        """The per-node client's settings: those given, or the defaults."""
        return self.client if self.client is not None else MooncakeClient()

    def engine_segment_bytes(self) -> int:
        """What each engine contributes to the pool: nothing in standalone mode (vLLM requires 0)."""
        if self.mode == "standalone":
            return 0
        return int(parse_quantity(self.global_segment_size if self.global_segment_size is not None else "4Gi"))


class LmcacheStore(ApiModel):
    """An LMCache server (Deployment + Service) that every engine uses as a remote KV tier."""

    server_image: Image | None = Field(
        default=None,
        description="Image that provides lmcache_server (pip package lmcache). Default: the engine image.",
    )
    port: Port = Field(default=65432, description="Port of the LMCache server.")
    size: Quantity = Field(default="32Gi", description="Memory of the LMCache server.")
    chunk_size: Annotated[int, Field(ge=16, le=65536)] | None = Field(
        default=None, description="Tokens per LMCache chunk. LMCache default 256."
    )


DEFAULT_HUGEPAGE_SIZE = "2Mi"
"""The page size of a huge-page pool when spec.transfer.network.hugepages names none."""


class PegaflowServer(ApiModel):
    """`pegaflow-server`, one per node (DaemonSet `<name>-kv-node`): it owns the node's pinned host KV pool, SSD
    cache, RDMA NICs and index. Host access: it runs on the host network (its address must be routable for
    cross-node hits) and, with the engine pods, in the host IPC namespace, because vLLM workers hand it KV through
    CUDA IPC; it sees the node's GPUs through NVIDIA_VISIBLE_DEVICES=all (the NVIDIA container runtime) without
    requesting any, and pins memory (IPC_LOCK). Its namespace must allow privileged pods."""

    image: Image = Field(description="Image with pegaflow-server (pip pegaflow-llm or pegaflow-llm-cu13).")
    pool_size: Quantity = Field(
        default="30Gi", description="Pinned host memory of the node's pool (--pool-size); the pod requests it."
    )
    port: Port = Field(default=50055, description="gRPC port on the node (--addr <node IP>:<port>).")
    http_port: Port = Field(default=9091, description="Health and Prometheus port (--http-addr).")
    ssd_cache: SsdCache | None = Field(
        default=None, description="SSD tier (--ssd-cache-path, --ssd-cache-capacity from size)."
    )
    nics: Annotated[list[NicName], Field(max_length=32)] = Field(
        default_factory=list, description="RDMA NICs for cross-node reads (--nics), e.g. [mlx5_0, mlx5_1]."
    )
    hugepages: bool = Field(
        default=False,
        description="Back the pool with huge pages (--use-hugepages); reserve them on the nodes in advance.",
    )
    placement: PodPlacement = Field(
        default_factory=PodPlacement,
        description="Nodes the server runs on. Default: the nodes the pools that use the store select.",
    )


class PegaflowMetaserver(ApiModel):
    """`pegaflow-metaserver`, one per deployment (Deployment + Service `<name>-kv-store`): the approximate global
    block index for cross-node hits."""

    enabled: bool = Field(default=True, description="Deploy the metaserver (servers then share hits across nodes).")
    port: Port = Field(default=50056, description="Port of the metaserver (--addr 0.0.0.0:<port>).")
    image: Image | None = Field(default=None, description="Image with pegaflow-metaserver. Default: the server's.")


class PegaflowStore(ApiModel):
    """PegaFlow (Novita AI) as the shared KV tier: vLLM's PegaKVConnector (kv_connector_module_path
    pegaflow.connector, which the engine image must contain) in read_write mode on prefill and save_only on
    decode, joined to the transfer through MultiConnector, as PegaFlow's P/D recipe does."""

    server: PegaflowServer = Field(description="The per-node server.")
    metaserver: PegaflowMetaserver = Field(default_factory=PegaflowMetaserver, description="The cluster index.")


class KvStore(ApiModel):
    """A shared KV store that outlives any single engine."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.mooncake) || self.type == 'mooncake'",
            message="spec.kvCache.store.mooncake is set but type is not mooncake: remove it or set type: mooncake",
            field_path=".mooncake",
        ),
        CelRule(
            rule="!has(self.lmcache) || self.type == 'lmcache'",
            message="spec.kvCache.store.lmcache is set but type is not lmcache: remove it or set type: lmcache",
            field_path=".lmcache",
        ),
        CelRule(
            rule="(self.type == 'pegaflow') == has(self.pegaflow)",
            message="spec.kvCache.store.pegaflow must be set exactly when type is pegaflow: add "
            "spec.kvCache.store.pegaflow.server.image, or remove the block",
            field_path=".pegaflow",
        ),
    )

    type: Literal["mooncake", "lmcache", "pegaflow"] = Field(description="Which store to deploy and connect.")
    pools: PoolList = Field(default_factory=_both_pools, description="Pools that use the store.")
    mooncake: MooncakeStore | None = Field(default=None, description="Mooncake store settings (type mooncake).")
    lmcache: LmcacheStore | None = Field(default=None, description="LMCache server settings (type lmcache).")
    pegaflow: PegaflowStore | None = Field(default=None, description="PegaFlow settings (type pegaflow).")


class KvCacheSpec(ApiModel):
    """KV cache tiers beyond GPU memory. Combined with the P/D connector through vLLM's MultiConnector."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.disk) || has(self.cpu)",
            message="spec.kvCache.disk sits behind the CPU tier: add spec.kvCache.cpu with a size",
            field_path=".disk",
        )
    )

    cpu: CpuTier | None = Field(default=None, description="Host-memory tier.")
    disk: DiskTier | None = Field(default=None, description="File-system tier behind the host-memory tier.")
    store: KvStore | None = Field(default=None, description="Shared remote store (Mooncake or LMCache).")
