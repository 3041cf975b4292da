"""MoRIIOConnector (AMD MoRI-IO), write or read mode."""

from __future__ import annotations

from typing import Any

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.frontend.contract import ANNOTATION_MORIIO_HANDSHAKE_PORT, ANNOTATION_MORIIO_NOTIFY_PORT
from disagg.names import child_name

from .base import ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring


def moriio_wiring(context: PoolContext) -> Wiring:
    settings = context.transfer.moriio
    # Ports are strings because that is how MoRI-IO's own defaults and examples spell them.
    extra: dict[str, Any] = {}
    if context.router == "vllm-router":
        # vllm-router learns MoRI-IO engines from their heartbeats; the operator's frontend reads them from their
        # pods (with their pairing revision), and engines without a proxy_ip send none.
        extra["proxy_ip"] = child_name(context.deployment, "router")
        extra["proxy_ping_port"] = str(settings.proxy_ping_port)
    extra |= {
        "http_port": str(ENGINE_HTTP_PORT),
        "handshake_port": str(settings.handshake_port),
        "notify_port": str(settings.notify_port),
        "backend": settings.backend,
    }
    if settings.mode == "read":
        extra["read_mode"] = True
    if settings.transfer_timeout_seconds is not None:
        extra["transfer_timeout"] = settings.transfer_timeout_seconds
    return Wiring(
        entry=ConnectorEntry("MoRIIOConnector", ROLE_OF_POOL[context.role], extra),
        ports=[
            {"name": "mori-handshake", "containerPort": settings.handshake_port, "protocol": "TCP"},
            {"name": "mori-notify", "containerPort": settings.notify_port, "protocol": "TCP"},
        ],
        annotations={
            ANNOTATION_MORIIO_HANDSHAKE_PORT: str(settings.handshake_port),
            ANNOTATION_MORIIO_NOTIFY_PORT: str(settings.notify_port),
        },
    )
