"""Who may write what: whether a desired child is ours to write (D70), and who owns `spec.replicas` of a workload
(D20). Pure functions of objects.

The operator writes only objects it created for this DisaggDeployment: one whose controller reference names it,
or an orphan it left behind (our labels, written by our field manager, no controller at all, as after
`kubectl delete --cascade=orphan`). Anything else with a child's name is someone else's and is never written.

Server-side apply removes a field when its only manager stops sending it, so an autoscaled workload's replicas are
first co-owned by REPLICAS_MANAGER (applied with the current value) and only then dropped from the main apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disagg.names import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY

from .children import FIELD_MANAGER

CREATE_ONLY_VERSION = str(2**63 - 1)
"""A resourceVersion no stored object has: versions are etcd revisions, a counter of writes (int64) that would need
2**63 - 1 writes to get there. Sent with a server-side apply it makes the apply create-only (D191): an object at
that name fails the version check with 409 Conflict before anything is written, and a missing one is created (the
API server ignores the version of an object it creates)."""


@dataclass(frozen=True)
class Claim:
    """What the apply step may do with one desired child."""

    action: Literal["create", "absent", "update", "conflict", "unknown"]
    """"absent": not in the cache as ours, and not read: created only if nothing is at that name (CREATE_ONLY_VERSION),
    read and claimed only when something is. "unknown": the object could not be read, so it is not written either."""
    uid: str | None = None
    """For an update: the live object's uid, sent with the apply so that a same-named object created after our
    read is refused by the API server instead of being written."""
    holder: str = ""
    """For a conflict: who the object belongs to, in words."""


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def _written_by_us(obj: dict[str, Any]) -> bool:
    return any(
        entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply"
        for entry in obj.get("metadata", {}).get("managedFields") or []
    )


def claim(live: dict[str, Any] | None, owner_uid: str, deployment: str) -> Claim:
    """Whether the DisaggDeployment (`deployment`, uid `owner_uid`) may write the object now at a child's name."""
    if live is None:
        return Claim("create")
    metadata = live.get("metadata") or {}
    controller = _controller(live)
    if controller is not None:
        if controller.get("uid") == owner_uid:
            return Claim("update", uid=metadata.get("uid"))
        return Claim("conflict", holder=f"controlled by {controller.get('kind')} {controller.get('name')}")
    labels = metadata.get("labels") or {}
    ours = labels.get(LABEL_DEPLOYMENT) == deployment and labels.get(LABEL_MANAGED_BY) == MANAGED_BY
    if ours and _written_by_us(live):
        return Claim("update", uid=metadata.get("uid"))  # our orphan: adopted
    return Claim("conflict", holder="not created by this DisaggDeployment")


def conflict_message(kind: str, name: str, holder: str) -> str:
    return (
        f"{kind} {name} already exists and is {holder}; the operator does not change objects it did not create, so "
        f"nothing was applied: rename this DisaggDeployment, or delete or rename that {kind}"
    )


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
    """The minimal apply body that sets only spec.replicas of an existing or just-created workload. The object's
    uid, when known, goes along as a precondition: a same-named replacement is never written."""
    metadata = obj["metadata"]
    identity = {"name": metadata["name"], "namespace": metadata["namespace"]}
    if metadata.get("uid"):
        identity["uid"] = metadata["uid"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": identity,
        "spec": {"replicas": replicas},
    }
