"""Which pods of a pool serve, and which are still starting. Pure functions of pod objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.api.pool import PoolName
from disagg.names import LABEL_ROLE, LWS_WORKER_INDEX_LABEL


@dataclass(frozen=True)
class PoolPods:
    ready: list[tuple[str, str]]
    """(pod name, pod IP) of API pods that are Ready: these carry the pool's load and serve /metrics."""
    starting: int
    """API pods that exist but are not Ready yet: capacity on its way."""


def _is_ready(pod: dict[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def pool_pods(pods: list[dict[str, Any]], pool: PoolName) -> PoolPods:
    """The pool's API pods (leaders of multi-node replicas; workers run headless and serve nothing)."""
    ready: list[tuple[str, str]] = []
    starting = 0
    for pod in pods:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(LABEL_ROLE) != pool or metadata.get("deletionTimestamp"):
            continue
        if labels.get(LWS_WORKER_INDEX_LABEL, "0") != "0":
            continue
        ip = (pod.get("status") or {}).get("podIP")
        if _is_ready(pod) and ip:
            ready.append((metadata["name"], ip))
        else:
            starting += 1
    return PoolPods(sorted(ready), starting)
