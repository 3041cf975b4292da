"""Host-memory and file-system KV tiers through vLLM's OffloadingConnector."""

from __future__ import annotations

from typing import Any

from disagg.api.kvcache import CpuTier, DiskTier
from disagg.api.units import parse_quantity

from .base import ConnectorEntry, PoolContext, Wiring


def offloading_wiring(context: PoolContext, cpu: CpuTier, disk: DiskTier | None) -> Wiring:
    size = int(parse_quantity(cpu.size))
    extra: dict[str, Any] = {"cpu_bytes_to_use": size, "eviction_policy": cpu.eviction_policy}
    if disk is not None and context.role in disk.pools:
        extra["spec_name"] = "TieringOffloadingSpec"
        extra["secondary_tiers"] = [{"type": "fs", "root_dir": disk.mount_path}]
    else:
        extra["spec_name"] = "CPUOffloadingSpec"
    # The --kv-offloading-* flags would overwrite a P/D connector, so the tier is spelled as a connector entry.
    return Wiring(entry=ConnectorEntry("OffloadingConnector", "kv_both", extra))
