"""Plugin connectors loaded by class name (TileRT, PegaFlow, ...)."""

from __future__ import annotations

from disagg.api.transfer import CustomConnectorSettings

from .base import ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring

_ROLE_NAMES = {"producer": "kv_producer", "consumer": "kv_consumer", "both": "kv_both"}


def custom_wiring(context: PoolContext) -> Wiring:
    settings = context.transfer.custom
    assert isinstance(settings, CustomConnectorSettings)  # validation guarantees it for connector "custom"
    per_pool = settings.prefill if context.role == "prefill" else settings.decode
    role = _ROLE_NAMES[per_pool.role] if per_pool.role else ROLE_OF_POOL[context.role]
    return Wiring(
        entry=ConnectorEntry(
            settings.connector_class,
            role,
            {**settings.extra_config, **per_pool.extra_config},
            module_path=settings.module_path,
        )
    )
