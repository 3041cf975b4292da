"""NixlConnector (pull), NixlPushConnector (push) and bidirectional NIXL."""

from __future__ import annotations

from typing import Any

from disagg.frontend.contract import ANNOTATION_SIDE_CHANNEL_PORT

from .base import ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring, literal_env

CONNECTOR_NAMES = {"nixl": "NixlConnector", "nixl-push": "NixlPushConnector"}


def nixl_wiring(context: PoolContext) -> Wiring:
    transfer = context.transfer
    settings = transfer.nixl
    extra: dict[str, Any] = {"backends": list(settings.backends)}
    if settings.num_threads is not None:
        extra["num_threads"] = settings.num_threads
    if settings.lease_seconds is not None:
        extra["kv_lease_duration"] = settings.lease_seconds
    if settings.enforce_handshake_compat is not None:
        extra["enforce_handshake_compat"] = settings.enforce_handshake_compat
    if transfer.connector == "nixl-push" and settings.push_registration_timeout_seconds is not None:
        extra["push_registration_timeout"] = settings.push_registration_timeout_seconds
    bidirectional = settings.bidirectional
    if bidirectional.enabled:
        # Both pools read these keys (scheduler and worker), so they are rendered identically on each side.
        extra["bidirectional_kv_xfer"] = True
        if bidirectional.blocks_ttl_seconds is not None:
            extra["decoder_kv_blocks_ttl"] = bidirectional.blocks_ttl_seconds
        if bidirectional.recompute_threshold is not None:
            extra["kv_recompute_threshold"] = bidirectional.recompute_threshold
    entry = ConnectorEntry(CONNECTOR_NAMES[transfer.connector], ROLE_OF_POOL[context.role], extra)
    return side_channel_wiring(entry, settings.side_channel_port, context.pool.spec.data_parallel)


def side_channel_wiring(entry: ConnectorEntry, base: int, ranks: int) -> Wiring:
    """A NIXL connector's entry with its side channel: host and port variables, container ports and the contract
    annotation the frontend reads for push coordinates."""
    return Wiring(
        entry=entry,
        # The handshake listener binds this host and advertises it to peers, so it must be the pod's own IP
        # (the default "localhost" is unreachable from other pods, and 0.0.0.0 makes decode dial itself).
        env=[
            {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            literal_env("VLLM_NIXL_SIDE_CHANNEL_PORT", str(base)),
        ],
        ports=side_channel_ports(base, ranks),
        annotations={ANNOTATION_SIDE_CHANNEL_PORT: str(base)},
    )


def side_channel_ports(base: int, ranks: int) -> list[dict[str, Any]]:
    """One container port per data-parallel rank of the replica: rank r listens on base + r (r is the global rank).

    A pod hosting ranks [start, start + local) binds only those ports; pods of multi-node replicas share one
    template, so they declare the whole range of the replica.
    """
    return [{"name": f"nixl-{rank}", "containerPort": base + rank, "protocol": "TCP"} for rank in range(ranks)]
