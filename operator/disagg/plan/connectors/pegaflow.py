"""PegaKVConnector against the node's pegaflow-server (PegaFlow's P/D recipe: read_write on prefill, save_only on
decode, next to the transfer connector in MultiConnector)."""

from __future__ import annotations

from disagg.api.kvcache import PegaflowStore

from .base import HOST_IP_ENV, ConnectorEntry, PoolContext, Wiring, host_ip_env, literal_env

PEGAFLOW_CONNECTOR = "PegaKVConnector"
PEGAFLOW_MODULE = "pegaflow.connector"
MODE_OF_POOL = {"prefill": "read_write", "decode": "save_only"}
"""Prefill loads hits and saves; decode only saves what it computed (PegaFlow's docs/deployment.md)."""


def pegaflow_wiring(context: PoolContext, store: PegaflowStore) -> Wiring:
    return Wiring(
        entry=ConnectorEntry(
            PEGAFLOW_CONNECTOR,
            "kv_both",
            {"pegaflow.mode": MODE_OF_POOL[context.role]},
            module_path=PEGAFLOW_MODULE,
        ),
        # The connector reaches the server on its own node, which listens on the host network.
        env=[
            host_ip_env(),
            literal_env("PEGAFLOW_HOST", f"http://$({HOST_IP_ENV})"),
            literal_env("PEGAFLOW_PORT", str(store.server.port)),
        ],
        # vLLM workers hand their KV blocks to the server through CUDA IPC, which needs one IPC namespace.
        host_ipc=True,
    )
