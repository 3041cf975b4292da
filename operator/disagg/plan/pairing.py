"""Pairing revisions: what a prefill engine and a decode engine must agree on to hand KV to each other.

Decided here once. The frontend never pairs a prefill and a decode of different revisions (docs/frontend.md), so
the revision is a hash of exactly what both pools must share, and nothing that one pool may change alone: a change
of replicas, resources or a pool's own tuning keeps the revision (that pool rolls alone), a change below rolls both
pools into a new revision.

- the engine images (the vLLM build and version) of both pools;
- the model and its revision;
- the KV transfer: connector, the connector's own settings, the buffer device;
- per pool: KV cache dtype, block size and the speculative method (counts may differ, D-rules allow it);
- PYTHONHASHSEED (block hashes) and tokens-only mode (the render tier).

The generation orders revisions: a new revision gets the DisaggDeployment's `metadata.generation` of the spec
that introduced it, and keeps it (through `status.pairingGeneration`) for as long as the revision stays, so a
later edit that keeps the revision never changes the pods.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from disagg.api.resolve import ResolvedDeployment, ResolvedPool, ResolvedTransfer
from disagg.api.status import DisaggDeploymentStatus

REVISION_LENGTH = 10
"""Hex digits of the sha256 kept in the label: collisions among a deployment's few revisions are negligible."""


@dataclass(frozen=True)
class Pairing:
    revision: str
    generation: int


def _pool_facts(pool: ResolvedPool) -> dict[str, Any]:
    if pool.custom is not None:
        return {"image": pool.custom.image}
    engine = pool.engine
    speculative = engine.speculative
    return {
        "image": pool.image,
        "kvCacheDtype": engine.kv_cache_dtype,
        "blockSize": engine.block_size,
        "speculativeMethod": speculative.method if speculative is not None else None,
    }


def _transfer_facts(transfer: ResolvedTransfer) -> dict[str, Any]:
    block = {
        "nixl": transfer.nixl,
        "nixl-push": transfer.nixl,
        "moriio": transfer.moriio,
        "mooncake": transfer.mooncake,
        "lmcache": transfer.lmcache,
        "custom": transfer.custom,
    }[transfer.connector]
    return {
        "connector": transfer.connector,
        "settings": block.model_dump(mode="json", by_alias=True) if block is not None else None,
        "bufferDevice": transfer.buffer_device,
    }


def pairing_facts(deployment: ResolvedDeployment) -> dict[str, Any]:
    """Everything the revision hashes, as plain JSON (shown by `disagg plan`)."""
    return {
        "model": {"name": deployment.model.name, "revision": deployment.model.revision},
        "pools": {pool.role: _pool_facts(pool) for pool in deployment.pools},
        "transfer": _transfer_facts(deployment.transfer),
        "pythonHashSeed": deployment.python_hash_seed,
        "tokensOnly": deployment.tokens_only,
    }


def pairing_revision(deployment: ResolvedDeployment) -> str:
    text = json.dumps(pairing_facts(deployment), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:REVISION_LENGTH]


def pairing_generation(revision: str, generation: int | None, previous: DisaggDeploymentStatus | None) -> int:
    """The generation of `revision`: the one status recorded for it, else the spec's own generation (1 for a
    file that was never applied)."""
    if previous is not None and previous.pairing_revision == revision and previous.pairing_generation:
        return previous.pairing_generation
    return generation or 1


def plan_pairing(
    deployment: ResolvedDeployment, generation: int | None, previous: DisaggDeploymentStatus | None
) -> Pairing:
    revision = pairing_revision(deployment)
    return Pairing(revision, pairing_generation(revision, generation, previous))
