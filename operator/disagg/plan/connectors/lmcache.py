"""LMCacheConnectorV1 against a shared LMCache server, as the P/D channel or as a remote tier."""

from __future__ import annotations

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.names import child_name

from .base import KV_CONFIG_DIR, ROLE_OF_POOL, ConnectorEntry, PoolContext, Wiring, literal_env

LMCACHE_CONFIG_FILE = "lmcache.yaml"


def lmcache_server_port(spec: DisaggDeploymentSpec) -> int:
    if spec.kv_cache.store is not None and spec.kv_cache.store.lmcache is not None:
        return spec.kv_cache.store.lmcache.port
    if spec.transfer.lmcache is not None:
        return spec.transfer.lmcache.server_port
    return 65432


def lmcache_chunk_size(spec: DisaggDeploymentSpec) -> int | None:
    if spec.transfer.lmcache is not None and spec.transfer.lmcache.chunk_size is not None:
        return spec.transfer.lmcache.chunk_size
    if spec.kv_cache.store is not None and spec.kv_cache.store.lmcache is not None:
        return spec.kv_cache.store.lmcache.chunk_size
    return None


def lmcache_config(deployment: str, spec: DisaggDeploymentSpec) -> str:
    """LMCache YAML: KV goes to (and comes from) the shared server rather than a private CPU buffer."""
    lines = [
        "local_cpu: false",
        f'remote_url: "lm://{child_name(deployment, "kv-store")}:{lmcache_server_port(spec)}"',
        'remote_serde: "naive"',
    ]
    chunk = lmcache_chunk_size(spec)
    if chunk is not None:
        lines.insert(0, f"chunk_size: {chunk}")
    return "\n".join(lines) + "\n"


def lmcache_wiring(context: PoolContext, *, as_transfer: bool) -> Wiring:
    role = ROLE_OF_POOL[context.role] if as_transfer else "kv_both"
    return Wiring(
        entry=ConnectorEntry("LMCacheConnectorV1", role),
        env=[literal_env("LMCACHE_CONFIG_FILE", f"{KV_CONFIG_DIR}/{LMCACHE_CONFIG_FILE}")],
        config_files={LMCACHE_CONFIG_FILE: lmcache_config(context.deployment, context.spec)},
    )
