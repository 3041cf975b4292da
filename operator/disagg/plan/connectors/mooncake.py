"""MooncakeConnector (point-to-point P/D) and the Mooncake Store tier."""

from __future__ import annotations

import json
from typing import Any

from disagg.api.kvcache import MooncakeStore
from disagg.api.units import parse_quantity
from disagg.names import BOOTSTRAP_PORT_ANNOTATION, child_name

from .base import (
    HOST_IP_ENV,
    KV_CONFIG_DIR,
    ROLE_OF_POOL,
    ConnectorEntry,
    PoolContext,
    Wiring,
    host_ip_env,
    literal_env,
)

MOONCAKE_CONFIG_FILE = "mooncake.json"


def mooncake_wiring(context: PoolContext) -> Wiring:
    settings = context.transfer.mooncake
    extra: dict[str, Any] = {"mooncake_protocol": settings.protocol}
    if settings.devices:
        extra["device_name"] = ",".join(settings.devices)
    if settings.num_workers is not None:
        extra["num_workers"] = settings.num_workers
    env = []
    ports = []
    annotations = {}
    if context.role == "prefill":
        # Prefill engines run the bootstrap server decode asks for engine ids; the router finds its port through
        # the pod annotation.
        env.append(literal_env("VLLM_MOONCAKE_BOOTSTRAP_PORT", str(settings.bootstrap_port)))
        ports.append({"name": "bootstrap", "containerPort": settings.bootstrap_port, "protocol": "TCP"})
        annotations[BOOTSTRAP_PORT_ANNOTATION] = str(settings.bootstrap_port)
    if settings.nvidia_peermem is False:
        env.append(literal_env("WITH_NVIDIA_PEERMEM", "0"))
    return Wiring(
        entry=ConnectorEntry("MooncakeConnector", ROLE_OF_POOL[context.role], extra),
        env=env,
        ports=ports,
        annotations=annotations,
    )


def mooncake_store_wiring(context: PoolContext, store: MooncakeStore) -> Wiring:
    extra: dict[str, Any] = {}
    if context.role == "decode" and store.save_decode_cache:
        extra["save_decode_cache"] = True
    standalone = store.mode == "standalone"
    env = [literal_env("MOONCAKE_CONFIG_PATH", f"{KV_CONFIG_DIR}/{MOONCAKE_CONFIG_FILE}")]
    if standalone:
        # Puts land in the segment of the client on the engine's own node, which owns the pool and its SSD tier.
        env += [
            host_ip_env(),
            literal_env("MOONCAKE_PREFERRED_SEGMENT", f"$({HOST_IP_ENV}):{store.node_client().segment_port}"),
        ]
    return Wiring(
        entry=ConnectorEntry("MooncakeStoreConnector", "kv_both", extra),
        env=env,
        config_files={MOONCAKE_CONFIG_FILE: mooncake_store_config(context.deployment, store)},
    )


def mooncake_store_config(deployment: str, store: MooncakeStore) -> str:
    """vLLM's MOONCAKE_CONFIG_PATH JSON (`MooncakeStoreConfig.from_file`). Standalone engines contribute no
    segment (vLLM requires 0 in standalone-store mode) and turn offload on when the node's client has an SSD tier,
    as the master does."""
    standalone = store.mode == "standalone"
    config: dict[str, Any] = {
        "metadata_server": "P2PHANDSHAKE",
        "master_server_address": f"{child_name(deployment, 'kv-store')}:{store.master_port}",
        "protocol": store.protocol,
        "device_name": ",".join(store.devices),
        "mode": "standalone-store" if standalone else "embedded",
        "global_segment_size": store.engine_segment_bytes(),
        "local_buffer_size": int(parse_quantity(store.local_buffer_size)),
        "enable_offload": standalone and store.node_client().offload is not None,
    }
    if store.tenant is not None:
        config["tenant_id"] = store.tenant
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
