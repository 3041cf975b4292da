"""KV connectors, one module per family, and their composition into --kv-transfer-config."""

from .compose import PoolConnectors, pool_connectors

__all__ = ["PoolConnectors", "pool_connectors"]
