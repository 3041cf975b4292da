"""MooncakeConnector (point-to-point P/D) and the Mooncake Store tier."""

from __future__ import annotations

import json
from typing import Any

from disagg.api.kvcache import MooncakeStore
from disagg.api.units import parse_quantity
from disagg.names import BOOTSTRAP_PORT_ANNOTATION, child_name

from .base import KV_CONFIG_DIR, ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring, literal_env

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
    return Wiring(
        entry=ConnectorEntry("MooncakeStoreConnector", "kv_both", extra),
        env=[literal_env("MOONCAKE_CONFIG_PATH", f"{KV_CONFIG_DIR}/{MOONCAKE_CONFIG_FILE}")],
        config_files={MOONCAKE_CONFIG_FILE: mooncake_store_config(context.deployment, store)},
    )


def mooncake_store_config(deployment: str, store: MooncakeStore) -> str:
    config = {
        "metadata_server": "P2PHANDSHAKE",
        "master_server_address": f"{child_name(deployment, 'kv-store')}:{store.master_port}",
        "protocol": store.protocol,
        "device_name": ",".join(store.devices),
        "mode": "embedded",
        "global_segment_size": int(parse_quantity(store.global_segment_size)),
        "local_buffer_size": int(parse_quantity(store.local_buffer_size)),
        "enable_offload": False,
    }
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
