"""Which DisaggDeployments the work queue takes first (D210): those whose spec no pass has reconciled yet.

A user who creates or changes a DisaggDeployment waits for the pass of that generation; every other pass (a child's
status report, a retry of a spec already reported, a resync) only refreshes what status already says about the
current spec, and can wait. The API server raises `metadata.generation` on every spec change and the status step
writes `status.observedGeneration` once a pass of that generation finished, so the two differing is the signal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def awaits_pass(owner: Mapping[str, Any] | None) -> bool:
    """True while the DisaggDeployment's current generation has not been observed by a finished pass. Not for one
    the cache does not hold (its own event requests it) or one being deleted (its pass only forgets it: the
    garbage collector removes the children)."""
    if owner is None:
        return False
    metadata = owner.get("metadata") or {}
    generation = metadata.get("generation")
    if generation is None or metadata.get("deletionTimestamp"):
        return False
    status = owner.get("status") or {}
    return bool(status.get("observedGeneration") != generation)
