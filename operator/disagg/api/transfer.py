"""`spec.transfer`: how KV cache moves from the prefill pool to the decode pool."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .cel import CelRule, with_cel
from .types import FreeForm, Port, Quantity, ResourceName

ConnectorKind = Literal["nixl", "nixl-push", "moriio", "mooncake", "lmcache", "custom"]
KvRole = Literal["producer", "consumer", "both"]
RouterProtocol = Literal["nixl", "mooncake", "moriio"]
NixlBackend = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Z0-9_]+$")]


class BidirectionalSettings(ApiModel):
    """Decode-to-prefill KV reuse for multi-turn conversations (NIXL pull mode only)."""

    enabled: bool = Field(default=False, description="Turn on bidirectional KV transfer on both pools.")
    blocks_ttl_seconds: Annotated[int, Field(ge=1, le=86_400)] | None = Field(
        default=None,
        description="How long decode keeps finished blocks for prefill to pull back (decoder_kv_blocks_ttl). "
        "vLLM default 480. Keep it above the typical gap between turns.",
    )
    recompute_threshold: Annotated[int, Field(ge=0, le=1_048_576)] | None = Field(
        default=None,
        description="Minimum remote tokens worth pulling instead of recomputing (kv_recompute_threshold). "
        "vLLM default 64.",
    )


class NixlSettings(ApiModel):
    """NIXL options (connectors nixl and nixl-push)."""

    backends: Annotated[list[NixlBackend], Field(min_length=1, max_length=8)] = Field(
        default_factory=lambda: ["UCX"],
        description="NIXL transport plugins, e.g. [UCX] or [LIBFABRIC] (AWS EFA).",
    )
    side_channel_port: Port = Field(
        default=5600,
        description="Base port of the NIXL handshake listener; data-parallel rank r listens on base + r.",
    )
    num_threads: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="UCX worker threads (num_threads). vLLM default 4."
    )
    lease_seconds: Annotated[int, Field(ge=1, le=86_400)] | None = Field(
        default=None,
        description="How long prefill holds finished KV for decode, renewed by decode heartbeats "
        "(kv_lease_duration). vLLM default 30.",
    )
    enforce_handshake_compat: bool | None = Field(
        default=None,
        description="Refuse peers whose compatibility hash differs (enforce_handshake_compat). vLLM default true.",
    )
    push_registration_timeout_seconds: Annotated[int, Field(ge=1, le=86_400)] | None = Field(
        default=None,
        description="nixl-push only: how long decode waits for a push after registering (push_registration_timeout).",
    )
    bidirectional: BidirectionalSettings = Field(
        default_factory=BidirectionalSettings,
        description="Decode-to-prefill reuse for multi-turn traffic. Pull mode (connector nixl) only.",
    )


class MoriioSettings(ApiModel):
    """MoRI-IO options (AMD ROCm; connector moriio)."""

    mode: Literal["write", "read"] = Field(
        default="write", description="write: prefill pushes KV layer by layer (default); read: decode pulls."
    )
    backend: Literal["rdma", "xgmi"] = Field(
        default="rdma", description="rdma between hosts; xgmi for prefill and decode on the same host."
    )
    handshake_port: Port = Field(
        default=6301, description="Base handshake port; each rank adds its offset, so keep a range free above it."
    )
    notify_port: Port = Field(
        default=61005, description="Base notification port; each rank adds its offset, so keep a range free above it."
    )
    proxy_ping_port: Port = Field(
        default=36367, description="Port on the router where engines register and send heartbeats."
    )
    transfer_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None, description="Per-transfer timeout (transfer_timeout). vLLM default 30."
    )


class MooncakeSettings(ApiModel):
    """Mooncake transfer engine options (connector mooncake)."""

    protocol: Literal["rdma", "tcp"] = Field(default="rdma", description="Transfer protocol.")
    devices: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=32)] = Field(
        default_factory=list, description="RDMA devices to use, e.g. [mlx5_0, mlx5_1]. Empty means all."
    )
    bootstrap_port: Port = Field(
        default=8998, description="Port of the bootstrap server on each prefill engine (VLLM_MOONCAKE_BOOTSTRAP_PORT)."
    )
    num_workers: Annotated[int, Field(ge=1, le=256)] | None = Field(
        default=None, description="Sender threads per prefill worker (num_workers). vLLM default 10."
    )
    nvidia_peermem: bool | None = Field(
        default=None,
        description="Set false where the nvidia-peermem module is not loaded (e.g. GB200) to use the DMA-BUF path "
        "(WITH_NVIDIA_PEERMEM=0).",
    )


class LmcacheSettings(ApiModel):
    """LMCache options (connector lmcache). Prefill stores KV into an LMCache server that decode reads from."""

    chunk_size: Annotated[int, Field(ge=16, le=65536)] | None = Field(
        default=None, description="Tokens per LMCache chunk (chunk_size). LMCache default 256."
    )
    server_size: Quantity = Field(
        default="32Gi", description="Memory of the shared LMCache server that carries KV from prefill to decode."
    )
    server_port: Port = Field(default=65432, description="Port of the LMCache server.")


class CustomRoleSettings(ApiModel):
    """Connector settings for one pool of a custom connector."""

    role: KvRole | None = Field(
        default=None, description="kv_role for this pool. Default: producer on prefill, consumer on decode."
    )
    extra_config: FreeForm = Field(
        default_factory=dict,
        description="kv_connector_extra_config keys for this pool, merged over transfer.custom.extraConfig.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class CustomConnectorSettings(ApiModel):
    """A connector plugin loaded by class name (connector custom), e.g. TileRTConnector or PegaKVConnector."""

    connector_class: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = Field(
        description="Connector class name (kv_connector)."
    )
    module_path: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")] | None = (
        Field(
            default=None,
            description="Python module that defines the class (kv_connector_module_path); the engine image must "
            "contain it. Leave unset only for connectors registered in vLLM.",
        )
    )
    extra_config: FreeForm = Field(
        default_factory=dict,
        description="kv_connector_extra_config keys for both pools.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    prefill: CustomRoleSettings = Field(
        default_factory=CustomRoleSettings, description="Settings that apply to the prefill pool only."
    )
    decode: CustomRoleSettings = Field(
        default_factory=CustomRoleSettings, description="Settings that apply to the decode pool only."
    )
    router_protocol: RouterProtocol | None = Field(
        default=None,
        description="P/D protocol vllm-router speaks for this connector (its --kv-connector). Unset means the "
        "router is not deployed and the decode pool's own endpoint is exposed through the Service.",
    )


class RdmaSettings(ApiModel):
    resource_name: ResourceName = Field(
        default="rdma/ib",
        description="Extended resource that grants RDMA devices (e.g. rdma/ib, vpc.amazonaws.com/efa).",
    )
    count: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description="RDMA devices per pod.")


class HugepagesSettings(ApiModel):
    page_size: Literal["2Mi", "1Gi"] = Field(default="2Mi", description="Huge page size.")
    size: Quantity = Field(description="Huge page memory per pod (requests and limits of hugepages-<pageSize>).")


class NetworkSettings(ApiModel):
    """Data-path plumbing for KV transfer: RDMA devices, transport tuning, capabilities."""

    rdma: RdmaSettings | None = Field(
        default=None, description="Request RDMA devices for every engine pod. Unset means TCP or NVLink only."
    )
    ucx_tls: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        default=None, description="UCX_TLS for engines, e.g. rc,ud,sm,cuda_ipc,cuda_copy or all."
    )
    ucx_net_devices: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        default=None, description="UCX_NET_DEVICES for engines, e.g. mlx5_0:1,mlx5_1:1 or all."
    )
    fi_provider: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description="FI_PROVIDER for the NIXL LIBFABRIC backend, e.g. efa."
    )
    ipc_lock: bool = Field(
        default=False,
        description="Add the IPC_LOCK capability so engines can pin memory for RDMA registration.",
    )
    host_network: bool = Field(
        default=False,
        description="Run engine pods on the host network (some RDMA fabrics require it). Ports must then be "
        "unique per node.",
    )
    hugepages: HugepagesSettings | None = Field(default=None, description="Give engine pods huge pages.")


class TransferSpec(ApiModel):
    """How KV cache moves from prefill to decode."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.nixl) || self.connector in ['nixl', 'nixl-push']",
            message="spec.transfer.nixl is set but the connector is not nixl or nixl-push: remove the block or change "
            "spec.transfer.connector",
            field_path=".nixl",
        ),
        CelRule(
            rule="!has(self.moriio) || self.connector == 'moriio'",
            message="spec.transfer.moriio is set but the connector is not moriio: remove the block or set "
            "spec.transfer.connector to moriio",
            field_path=".moriio",
        ),
        CelRule(
            rule="!has(self.mooncake) || self.connector == 'mooncake'",
            message="spec.transfer.mooncake is set but the connector is not mooncake: remove the block or set "
            "spec.transfer.connector to mooncake",
            field_path=".mooncake",
        ),
        CelRule(
            rule="!has(self.lmcache) || self.connector == 'lmcache'",
            message="spec.transfer.lmcache is set but the connector is not lmcache: remove the block or set "
            "spec.transfer.connector to lmcache",
            field_path=".lmcache",
        ),
        CelRule(
            rule="(self.connector == 'custom') == has(self.custom)",
            message="spec.transfer.custom must be set exactly when spec.transfer.connector is custom: add "
            "spec.transfer.custom.connectorClass, or remove the block",
            field_path=".custom",
        ),
        CelRule(
            rule="!(self.connector == 'nixl-push' && has(self.nixl) && self.nixl.bidirectional.enabled)",
            message="spec.transfer.nixl.bidirectional.enabled: bidirectional transfer is pull-only; use connector "
            "nixl or turn bidirectional off",
            field_path=".nixl.bidirectional.enabled",
        ),
    )

    connector: ConnectorKind = Field(
        default="nixl",
        description="KV connector family: nixl (NIXL pull, default), nixl-push, moriio (AMD MoRI-IO), mooncake, "
        "lmcache, or custom (a plugin class).",
    )
    load_failure_policy: Literal["fail", "recompute"] = Field(
        default="fail",
        description="What decode does when a KV load fails: fail the request, or recompute the prompt locally.",
    )
    buffer_device: Literal["cuda", "cpu", "xpu"] | None = Field(
        default=None,
        description="Where the connector stages KV (kv_buffer_device); cpu turns on host-buffer staging for NIXL. "
        "Default: the accelerator.",
    )
    nixl: NixlSettings | None = Field(default=None, description="NIXL options (connector nixl or nixl-push).")
    moriio: MoriioSettings | None = Field(default=None, description="MoRI-IO options (connector moriio).")
    mooncake: MooncakeSettings | None = Field(default=None, description="Mooncake options (connector mooncake).")
    lmcache: LmcacheSettings | None = Field(default=None, description="LMCache options (connector lmcache).")
    custom: CustomConnectorSettings | None = Field(
        default=None, description="Plugin connector settings (required when connector is custom)."
    )
    network: NetworkSettings = Field(
        default_factory=NetworkSettings, description="RDMA, transport tuning and capabilities for KV transfer."
    )
