"""What every connector module returns for one pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from disagg.api.kvcache import KvCacheSpec, MooncakeStore, PegaflowStore
from disagg.api.owned import KV_CONFIG_DIR as KV_CONFIG_DIR
from disagg.api.resolve import LmcacheServer, ResolvedPool, ResolvedTransfer, RouterKind
from disagg.names import PoolName

ROLE_OF_POOL: dict[PoolName, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}
"""NIXL deprecates kv_both; every P/D connector gets producer on prefill and consumer on decode."""


@dataclass(frozen=True)
class PoolContext:
    """Facts about the pool being wired that connectors need."""

    deployment: str
    pool: ResolvedPool
    transfer: ResolvedTransfer
    kv_cache: KvCacheSpec
    mooncake_store: MooncakeStore | None
    lmcache: LmcacheServer | None
    router: RouterKind | None = None
    """Which router fronts the engines (MoRI-IO engines register with vllm-router only)."""
    pegaflow: PegaflowStore | None = None

    @property
    def role(self) -> PoolName:
        return self.pool.role


@dataclass(frozen=True)
class ConnectorEntry:
    """One connector's section of --kv-transfer-config."""

    kv_connector: str
    kv_role: str
    extra_config: dict[str, Any] = field(default_factory=dict)
    module_path: str | None = None

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"kv_connector": self.kv_connector, "kv_role": self.kv_role}
        if self.module_path:
            entry["kv_connector_module_path"] = self.module_path
        if self.extra_config:
            entry["kv_connector_extra_config"] = self.extra_config
        return entry


@dataclass(frozen=True)
class Wiring:
    """A connector's contribution to one pool: its config entry and the pod plumbing it relies on."""

    entry: ConnectorEntry
    env: list[dict[str, Any]] = field(default_factory=list)
    ports: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    config_files: dict[str, str] = field(default_factory=dict)
    """File name -> content, shipped in the KV ConfigMap and mounted under KV_CONFIG_DIR."""
    host_ipc: bool = False
    """The engine pod joins the host IPC namespace (CUDA IPC with a per-node daemon, PegaFlow)."""


def literal_env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


HOST_IP_ENV = "HOST_IP"
"""The node's address (status.hostIP): where a per-node KV daemon on the host network listens."""


def host_ip_env() -> dict[str, Any]:
    return field_env(HOST_IP_ENV, "status.hostIP")


POD_NAME_ENV = "POD_NAME"
ENGINE_ID = f"$({POD_NAME_ENV})"
"""Every vLLM engine's kv_transfer_config.engine_id: its pod's name (kubelet expands it in the arguments), so the
frontend knows each engine's id from the pod alone (push and Mooncake decode name prefill's id before prefill
runs; bidirectional finds the decode engine holding a conversation by it). vLLM appends `_dp<rank>` per
data-parallel rank."""
