"""Who owns `spec.replicas` of a workload: the spec, or an autoscaler. Pure functions of objects.

Server-side apply removes a field when its only manager stops sending it, so an autoscaled workload's replicas are
first co-owned by REPLICAS_MANAGER (applied with the current value) and only then dropped from the main apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .children import FIELD_MANAGER


@dataclass(frozen=True)
class ReplicasAction:
    include_in_main_apply: bool
    """Send spec.replicas in the main apply (the spec owns the count, or the workload is being created)."""
    hand_over: int | None
    """Apply this count under REPLICAS_MANAGER first, so the replicas manager co-owns the field."""


def manages_replicas(obj: dict[str, Any], manager: str) -> bool:
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:replicas" in spec:
            return True
    return False


def replicas_action(owned_elsewhere: bool, desired: int, live: dict[str, Any] | None) -> ReplicasAction:
    if not owned_elsewhere:
        return ReplicasAction(include_in_main_apply=True, hand_over=None)
    if live is None:
        # Created with the spec's count, which the replicas manager then co-owns.
        return ReplicasAction(include_in_main_apply=True, hand_over=desired)
    if manages_replicas(live, FIELD_MANAGER):
        # The spec owned the count until now (autoscaling was just enabled, or the object was just created): keep
        # the live value while handing it over. An external HPA that already owns the field is never overwritten.
        current = int((live.get("spec") or {}).get("replicas", desired))
        return ReplicasAction(include_in_main_apply=False, hand_over=current)
    return ReplicasAction(include_in_main_apply=False, hand_over=None)


def replicas_patch(obj: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The minimal apply body that sets only spec.replicas of an existing or just-created workload."""
    metadata = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
        "spec": {"replicas": replicas},
    }
