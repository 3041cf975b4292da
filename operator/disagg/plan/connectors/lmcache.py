"""LMCacheConnectorV1 against a shared LMCache server, as the P/D channel or as a remote tier."""

from __future__ import annotations

from disagg.api.resolve import LmcacheServer
from disagg.names import child_name

from .base import KV_CONFIG_DIR, ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring, literal_env

LMCACHE_CONFIG_FILE = "lmcache.yaml"


def lmcache_config(deployment: str, server: LmcacheServer) -> str:
    """LMCache YAML: KV goes to (and comes from) the shared server rather than a private CPU buffer."""
    lines = [
        "local_cpu: false",
        f'remote_url: "lm://{child_name(deployment, "kv-store")}:{server.port}"',
        'remote_serde: "naive"',
    ]
    if server.chunk_size is not None:
        lines.insert(0, f"chunk_size: {server.chunk_size}")
    return "\n".join(lines) + "\n"


def lmcache_wiring(context: PoolContext, *, as_transfer: bool) -> Wiring:
    assert context.lmcache is not None  # resolved whenever the connector or the store tier is LMCache
    role = ROLE_OF_POOL[context.role] if as_transfer else "kv_both"
    return Wiring(
        entry=ConnectorEntry("LMCacheConnectorV1", role),
        env=[literal_env("LMCACHE_CONFIG_FILE", f"{KV_CONFIG_DIR}/{LMCACHE_CONFIG_FILE}")],
        config_files={LMCACHE_CONFIG_FILE: lmcache_config(context.deployment, context.lmcache)},
    )
