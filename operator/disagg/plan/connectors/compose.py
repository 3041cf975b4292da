"""Combine the transfer connector and the KV tiers of one pool into its --kv-transfer-config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import ENGINE_ID, ROLE_OF_POOL, PoolContext, Wiring
from .custom import custom_wiring
from .lmcache import lmcache_wiring
from .mooncake import mooncake_store_wiring, mooncake_wiring
from .moriio import moriio_wiring
from .nixl import nixl_wiring
from .offloading import offloading_wiring
from .pegaflow import pegaflow_wiring


@dataclass(frozen=True)
class PoolConnectors:
    """Everything KV-related one vLLM pool needs: the JSON, env, ports, annotations and files (the memory they pin is
    decided in api/resolve.py, `pinned_host_bytes`)."""

    kv_transfer_config: dict[str, Any]
    wirings: list[Wiring]

    @property
    def env(self) -> list[dict[str, Any]]:
        return [var for wiring in self.wirings for var in wiring.env]

    @property
    def ports(self) -> list[dict[str, Any]]:
        return [port for wiring in self.wirings for port in wiring.ports]

    @property
    def annotations(self) -> dict[str, str]:
        return {key: value for wiring in self.wirings for key, value in wiring.annotations.items()}

    @property
    def config_files(self) -> dict[str, str]:
        return {name: text for wiring in self.wirings for name, text in wiring.config_files.items()}

    @property
    def host_ipc(self) -> bool:
        return any(wiring.host_ipc for wiring in self.wirings)


def _transfer_wiring(context: PoolContext) -> Wiring:
    connector = context.transfer.connector
    if connector in ("nixl", "nixl-push"):
        return nixl_wiring(context)
    if connector == "moriio":
        return moriio_wiring(context)
    if connector == "mooncake":
        return mooncake_wiring(context)
    if connector == "lmcache":
        return lmcache_wiring(context, as_transfer=True)
    return custom_wiring(context)


def _tier_wirings(context: PoolContext) -> list[Wiring]:
    tiers = context.kv_cache
    wirings = []
    if tiers.cpu is not None and context.role in tiers.cpu.pools:
        wirings.append(offloading_wiring(context, tiers.cpu, tiers.disk))
    store = tiers.store
    if store is not None and context.role in store.pools:
        if context.mooncake_store is not None:
            wirings.append(mooncake_store_wiring(context, context.mooncake_store))
        elif context.pegaflow is not None:
            wirings.append(pegaflow_wiring(context, context.pegaflow))
        elif context.transfer.connector != "lmcache":
            # With connector lmcache the transfer entry already talks to the same LMCache server.
            wirings.append(lmcache_wiring(context, as_transfer=False))
    return wirings


def pool_connectors(context: PoolContext) -> PoolConnectors:
    """The pool's connectors, with MultiConnector wrapping them whenever there is more than one."""
    wirings = [_transfer_wiring(context), *_tier_wirings(context)]
    if len(wirings) == 1:
        config = wirings[0].entry.as_json()
    else:
        config = {
            "kv_connector": "MultiConnector",
            "kv_role": ROLE_OF_POOL[context.role],
            "kv_connector_extra_config": {"connectors": [wiring.entry.as_json() for wiring in wirings]},
        }
    config["engine_id"] = ENGINE_ID
    transfer = context.transfer
    if transfer.buffer_device is not None:
        config["kv_buffer_device"] = transfer.buffer_device
    config["kv_load_failure_policy"] = transfer.load_failure_policy
    return PoolConnectors(kv_transfer_config=config, wirings=wirings)
