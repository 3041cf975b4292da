"""Plugin connectors loaded by class name (TileRT, PegaFlow, ...)."""

from __future__ import annotations

from disagg.api.resolve import runs_nixl
from disagg.api.transfer import CustomConnectorSettings

from .base import ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring
from .nixl import side_channel_wiring

_ROLE_NAMES = {"producer": "kv_producer", "consumer": "kv_consumer", "both": "kv_both"}


def custom_wiring(context: PoolContext) -> Wiring:
    settings = context.transfer.custom
    assert isinstance(settings, CustomConnectorSettings)  # validation guarantees it for connector "custom"
    per_pool = settings.prefill if context.role == "prefill" else settings.decode
    role = _ROLE_NAMES[per_pool.role] if per_pool.role else ROLE_OF_POOL[context.role]
    entry = ConnectorEntry(
        settings.connector_class,
        role,
        {**settings.extra_config, **per_pool.extra_config},
        module_path=settings.module_path,
    )
    if runs_nixl(context.transfer, context.role):
        # A plugin MultiConnector (PegaFlow's P/D recipe: [NixlConnector, PegaKVConnector]) runs NIXL too, and
        # without the pod IP its side channel would advertise localhost to the peer.
        return side_channel_wiring(entry, context.transfer.nixl.side_channel_port, context.pool.spec.data_parallel)
    return Wiring(entry=entry)
