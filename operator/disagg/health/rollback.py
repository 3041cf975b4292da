"""Rolling a stuck P/D rollout back (pure): which revision to go back to, and the pod template that runs it.

Only with `spec.serving.rollout.onStuck: Rollback`. The revision to go back to is the one that serves now (the
older revision with the most ready engines in both pools). Its pod template is read from the pool Deployment's
own ReplicaSets, as `kubectl rollout undo` does: the newest ReplicaSet whose template carries that revision. The
rollback holds (the operator keeps applying that template instead of the spec's) until the spec changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from disagg.frontend.contract import LABEL_PAIRING_REVISION

from .admission import revision_counts
from .pods import EnginePod

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
TEMPLATE_HASH_LABEL = "pod-template-hash"


def rollback_revision(engines: Iterable[EnginePod], target: str) -> str | None:
    """The serving revision other than `target` with the most ready engines (both roles needed)."""
    best: tuple[int, str] | None = None
    for revision, row in revision_counts(engines):
        if revision == target or not row["prefill"] or not row["decode"]:
            continue
        size = row["prefill"] + row["decode"]
        if best is None or size > best[0]:
            best = (size, revision)
    return best[1] if best else None


def template_of(replica_sets: Iterable[Mapping[str, Any]], revision: str) -> dict[str, Any] | None:
    """The pod template of the newest ReplicaSet running `revision`, without the ReplicaSet's own hash label."""
    found: tuple[int, Mapping[str, Any]] | None = None
    for replica_set in replica_sets:
        template = (replica_set.get("spec") or {}).get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_PAIRING_REVISION, "") != revision:
            continue
        try:
            number = int(((replica_set.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION, 0))
        except ValueError:
            number = 0
        if found is None or number > found[0]:
            found = (number, template)
    if found is None:
        return None
    template = copy.deepcopy(dict(found[1]))
    template.get("metadata", {}).get("labels", {}).pop(TEMPLATE_HASH_LABEL, None)
    return template


def template_revision(template: Mapping[str, Any]) -> str:
    return str(((template.get("metadata") or {}).get("labels") or {}).get(LABEL_PAIRING_REVISION, ""))
