"""`spec.kvCache`: KV cache tiers beyond GPU memory (CPU, local disk, shared stores)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .cel import CelRule, at_most_one_of, with_cel
from .types import Image, ObjectName, Port, Quantity

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


class MooncakeStore(ApiModel):
    """A Mooncake distributed KV pool: a master (Deployment + Service) and engines that contribute memory."""

    global_segment_size: Quantity = Field(
        default="4Gi", description="Memory each engine contributes to the pool (global_segment_size)."
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
    )

    type: Literal["mooncake", "lmcache"] = Field(description="Which store to deploy and connect.")
    pools: PoolList = Field(default_factory=_both_pools, description="Pools that use the store.")
    mooncake: MooncakeStore | None = Field(default=None, description="Mooncake store settings (type mooncake).")
    lmcache: LmcacheStore | None = Field(default=None, description="LMCache server settings (type lmcache).")


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
