"""Engine pods as the serving check sees them: role, pairing revision, incarnation, and whether they are admitted.

An engine pod rendered with the `disagg.dev/serving` readiness gate becomes Ready only when the operator sets that
pod condition True. The operator does so for one *incarnation* (the pod's containers' total restart count, written
into the condition's message), so a container that restarts is a new, unadmitted engine until its pairs serve again:
its peers may hold stale transfer state about the incarnation before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from disagg.frontend.contract import ANNOTATION_PAIRING_GENERATION, LABEL_PAIRING_REVISION
from disagg.names import LABEL_ROLE, LWS_WORKER_INDEX_LABEL, SERVING_GATE, PoolName

_RESTARTS = re.compile(r"\brestarts=(\d+)\b")
_Obj = TypeVar("_Obj", bound=Mapping[str, Any])


@dataclass(frozen=True)
class EnginePod:
    name: str
    uid: str
    role: PoolName
    revision: str
    generation: int
    restarts: int
    created: str
    """metadata.creationTimestamp (RFC 3339 sorts as text)."""
    started: str
    """When the newest container incarnation started (RFC 3339), or "" if none runs."""
    up: bool
    """Running, not terminating, with an IP and every container ready: it could serve."""
    gated: bool
    """Rendered with the serving readiness gate."""
    admitted: bool
    """The gate condition is True for this incarnation (always True for pods without the gate that are up)."""
    gate_status: str | None
    """The gate condition's status as it is now ("True", "False" or None), whatever incarnation it was set for."""
    template: str
    """The pod-template-hash label: which ReplicaSet (pod template) the pod belongs to."""

    @property
    def routable(self) -> bool:
        """The frontend may send requests through it: up and Ready."""
        return self.up and self.admitted

    @property
    def candidate(self) -> bool:
        """Up, gated and waiting for the operator to admit it."""
        return self.up and self.gated and not self.admitted

    @property
    def returning(self) -> bool:
        """A candidate that served before: its gate was set False after a container restart (only the operator's
        revocation writes False; a new pod has no gate condition yet). Its peers may hold stale state about it."""
        return self.candidate and self.gate_status == "False"


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def admitted_restarts(condition: Mapping[str, Any] | None) -> int | None:
    """The incarnation the gate condition was set True for, or None when it is not True."""
    if condition is None or condition.get("status") != "True":
        return None
    found = _RESTARTS.search(str(condition.get("message", "")))
    return int(found.group(1)) if found else None


def gate_message(restarts: int, detail: str) -> str:
    return f"restarts={restarts}; {detail}"


def engine_pod(pod: Mapping[str, Any]) -> EnginePod | None:
    """The engine a pod is (prefill or decode API pod), or None for other pods (router, workers of multi-node
    replicas, render tier, stores)."""
    metadata = pod.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    role = labels.get(LABEL_ROLE)
    if role not in ("prefill", "decode") or labels.get(LWS_WORKER_INDEX_LABEL, "0") != "0":
        return None
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount", 0) or 0) for c in containers)
    started = max(
        (str(((c.get("state") or {}).get("running") or {}).get("startedAt") or "") for c in containers), default=""
    )
    gated = any(g.get("conditionType") == SERVING_GATE for g in spec.get("readinessGates") or [])
    containers_ready = _condition(status, "ContainersReady")
    up = (
        not metadata.get("deletionTimestamp")
        and status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and bool(containers)
        and all(c.get("ready") for c in containers)
        and (containers_ready is None or containers_ready.get("status") == "True")
    )
    gate = _condition(status, SERVING_GATE)
    admitted = (admitted_restarts(gate) == restarts) if gated else up
    try:
        generation = int((metadata.get("annotations") or {}).get(ANNOTATION_PAIRING_GENERATION, 0) or 0)
    except ValueError:
        generation = 0
    return EnginePod(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        role=role,  # type: ignore[arg-type]
        revision=labels.get(LABEL_PAIRING_REVISION, ""),
        generation=generation,
        restarts=restarts,
        created=str(metadata.get("creationTimestamp") or ""),
        started=started,
        up=up,
        gated=gated,
        admitted=admitted,
        gate_status=None if gate is None else str(gate.get("status")),
        template=labels.get("pod-template-hash", ""),
    )


def engine_pods(pods: Iterable[Mapping[str, Any]]) -> list[EnginePod]:
    found = [engine for pod in pods if (engine := engine_pod(pod)) is not None]
    return sorted(found, key=lambda e: (e.role, e.created, e.name))


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def owned_pods(
    pods: Iterable[_Obj],
    deployments: Iterable[str],
    leader_worker_sets: Iterable[str],
    replica_sets: Iterable[Mapping[str, Any]],
) -> list[_Obj]:
    """The pods of the DisaggDeployment's own workloads (the ones it created, D70): `deployments` are the uids of its
    Deployments, `leader_worker_sets` the names of its LeaderWorkerSets, `replica_sets` the ReplicaSets listed with
    its labels. A Deployment's pod is controlled by a ReplicaSet (checked by uid) that one of those Deployments
    controls; a LeaderWorkerSet's by the StatefulSet the LeaderWorkerSet controller names `<name>` (leaders) or
    `<name>-<group>` (workers), names no other object can hold while the LeaderWorkerSet runs. Labels alone are not
    ownership: anyone may label a pod like ours, and the serving check patches, probes and deletes what it is given."""
    ours = set(deployments)
    sets = set(leader_worker_sets)
    replica_set_uids = {
        str((rs.get("metadata") or {}).get("uid", "")) for rs in replica_sets if controller_uid(rs) in ours
    }
    found = []
    for pod in pods:
        controller = _controller(pod) or {}
        kind, name = controller.get("kind"), str(controller.get("name", ""))
        if kind == "ReplicaSet":
            owned = str(controller.get("uid", "")) in replica_set_uids
        elif kind == "StatefulSet":
            base, _, group = name.rpartition("-")
            owned = name in sets or (base in sets and group.isdigit())
        else:
            owned = False
        if owned:
            found.append(pod)
    return found


def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid in the object's controller reference ("" without one)."""
    return str((_controller(obj) or {}).get("uid", ""))


def owned_replica_sets(replica_sets: Iterable[_Obj], deployment_uid: str) -> list[_Obj]:
    """The ReplicaSets whose controller is the Deployment with `deployment_uid` (a rollback reads its template
    only from those)."""
    return [rs for rs in replica_sets if deployment_uid and controller_uid(rs) == deployment_uid]
