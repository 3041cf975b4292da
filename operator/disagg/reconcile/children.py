"""What the reconciler knows about children: identity, ownership, workload progress. Pure functions of objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.names import CHILD_KINDS, LABEL_ROLE

FIELD_MANAGER = "disagg-operator"
REPLICAS_MANAGER = "disagg-operator-replicas"
"""A second field manager that holds `spec.replicas` of autoscaled workloads, so the main apply can omit the
field without the API server resetting it (see docs/decisions.md, "replicas ownership")."""

ChildKey = tuple[str, str]
"""(kind, name) of a child inside its namespace."""

_CHILD_KIND_NAMES = frozenset(kind.name for kind in CHILD_KINDS)


def child_key(obj: dict[str, Any]) -> ChildKey:
    return obj["kind"], obj["metadata"]["name"]


def is_owned_by(obj: dict[str, Any], owner_uid: str) -> bool:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs)


def select_prunable(desired: set[ChildKey], live: list[dict[str, Any]], owner_uid: str) -> list[dict[str, Any]]:
    """Live children that are ours (our labels and our controller reference) but no longer desired.

    Objects carrying our labels without our owner reference are left alone: someone copied labels, or another
    DisaggDeployment of the same name once owned them; deleting them would destroy what we do not own.
    """
    prunable = [
        obj
        for obj in live
        if obj.get("kind") in _CHILD_KIND_NAMES
        and child_key(obj) not in desired
        and is_owned_by(obj, owner_uid)
        and not obj.get("metadata", {}).get("deletionTimestamp")
    ]
    return sorted(prunable, key=child_key)


@dataclass(frozen=True)
class WorkloadProgress:
    """The parts of a Deployment's or LeaderWorkerSet's status the DisaggDeployment reports."""

    desired: int
    replicas: int
    ready: int
    updated: int
    current_generation: bool
    stuck_reason: str | None = None


def workload_progress(obj: dict[str, Any] | None) -> WorkloadProgress | None:
    if obj is None:
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if obj.get("kind") == "DaemonSet":
        # One pod per selected node: the desired count is the scheduler's, not the spec's.
        observed = status.get("observedGeneration")
        return WorkloadProgress(
            desired=int(status.get("desiredNumberScheduled", 0) or 0),
            replicas=int(status.get("currentNumberScheduled", 0) or 0),
            ready=int(status.get("numberReady", 0) or 0),
            updated=int(status.get("updatedNumberScheduled", 0) or 0),
            current_generation=observed is not None and observed >= obj.get("metadata", {}).get("generation", 0),
        )
    desired = int(spec.get("replicas", 1))
    observed = status.get("observedGeneration")
    current = observed is None or observed >= obj.get("metadata", {}).get("generation", 0)
    if obj.get("kind") == "LeaderWorkerSet":
        current = True  # LeaderWorkerSet status carries no observedGeneration; its replica counts say enough
    stuck = None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            stuck = condition.get("message") or "rollout exceeded its progress deadline"
    return WorkloadProgress(
        desired=desired,
        replicas=int(status.get("replicas", 0) or 0),
        ready=int(status.get("readyReplicas", 0) or 0),
        updated=int(status.get("updatedReplicas", 0) or 0),
        current_generation=current,
        stuck_reason=stuck,
    )


_WAITING_PROBLEMS = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "InvalidImageName",
    "CreateContainerError",
)


def pod_problems(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per role, why pods are not running: unschedulable (with the scheduler's reason) or stuck containers.

    These explain a pool that is not ready, e.g. "0/8 nodes are available: 8 Insufficient nvidia.com/gpu".
    """
    problems: dict[str, list[str]] = {}
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
        role = (pod.get("metadata", {}).get("labels") or {}).get(LABEL_ROLE)
        if not role or pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        name = pod["metadata"]["name"]
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                problems.setdefault(role, []).append(f"pod {name} unschedulable: {condition.get('message', '')}")
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _WAITING_PROBLEMS:
                problems.setdefault(role, []).append(
                    f"pod {name} {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
                )
    return problems
