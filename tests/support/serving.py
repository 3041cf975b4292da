"""The serving check in the in-process tier: a reconciler with a ServingChecker whose frontend is simulated.

`FakeFrontend` answers the admin API the way the operator's frontend does, from the pods in the fake API server:
it finds engines and candidates with the frontend's own contract code (`engine_from_pod`) and pairs them with its
own `Selector` (same pairing revision only), and each pair's probe passes or fails as the test says.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from disagg.frontend.contract import engine_from_pod
from disagg.frontend.selection import Selector
from disagg.health.verdict import Outcome
from disagg.names import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY, SERVING_GATE
from disagg.reconcile.kube import Kube
from disagg.reconcile.prober import PairRef, ProbeError
from disagg.reconcile.serving import ServingChecker
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import NAMESPACE, NOW, Harness, reconciler_for

Behaviour = Callable[[str, str], bool | str]
"""(prefill pod, decode pod) -> True (passes), False or an error text (fails)."""


@dataclass
class FakeFrontend:
    server: FakeApiServer
    deployment: str
    behaviour: Behaviour = lambda prefill, decode: True
    reachable: bool = True
    completions_ok: bool = True
    drains: list[tuple[str, str, str]] = field(default_factory=list)
    """(host, prefill, decode) drain calls."""
    undrains: list[tuple[str, str, str]] = field(default_factory=list)
    probed: list[list[tuple[str, str]]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    """The frontend pod IP each pairs list and probe went to."""
    refuse_drain: set[str] = field(default_factory=set)
    """Frontend pod IPs whose drain calls fail."""
    completions: int = 0
    completed: list[str] = field(default_factory=list)
    """The pod IP each completion (the endpoint check) went to."""

    def _selector(self) -> Selector:
        selector = Selector()
        engines = []
        for pod in self.server.objects("Pod", NAMESPACE):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(LABEL_DEPLOYMENT) != self.deployment:
                continue
            engine = engine_from_pod(pod, 8000)
            if engine is not None and engine.role in ("prefill", "decode"):
                engines.append(engine)
        selector.update(engines)
        return selector

    def _check(self) -> None:
        if not self.reachable:
            raise ProbeError("GET http://10.9.0.1:8001/disagg/v1/pairs: ClientConnectorError: Connection refused")

    async def pairs(self, host: str, port: int) -> list[PairRef]:
        self.asked.append(host)
        self._check()
        selector = self._selector()
        drained = {(p, d) for _, p, d in self.drains} - {(p, d) for _, p, d in self.undrains}
        refs = [
            PairRef(
                i.pair.prefill.name,
                i.pair.decode.name,
                i.pair.revision,
                (i.pair.prefill.name, i.pair.decode.name) in drained,
                False,
            )
            for i in selector.pairs(0.0)
        ]
        refs += [PairRef(p.prefill.name, p.decode.name, p.revision, False, True) for p in selector.candidate_pairs()]
        return refs

    async def probe(self, host: str, port: int, pairs: list[PairRef], deadline: float) -> list[Outcome]:
        self._check()
        self.probed.append([(p.prefill, p.decode) for p in pairs])
        outcomes = []
        for ref in pairs:
            verdict = self.behaviour(ref.prefill, ref.decode)
            error = "" if verdict is True else (verdict or "decode failed: 500 Internal Server Error")
            outcomes.append(
                Outcome(
                    ref.prefill,
                    ref.decode,
                    ref.revision,
                    verdict is True,
                    0.05,
                    str(error),
                    True if verdict is True else None,
                    ref.candidate,
                    ref.drained,
                )
            )
        return outcomes

    async def drain(self, host: str, port: int, prefill: str, decode: str, seconds: float, reason: str) -> None:
        if host in self.refuse_drain:
            raise ProbeError(f"POST http://{host}:{port}/disagg/v1/drain: 503 Service Unavailable")
        self.drains.append((host, prefill, decode))

    async def undrain(self, host: str, port: int, prefill: str, decode: str) -> None:
        self.undrains.append((host, prefill, decode))

    async def complete(self, host: str, port: int, model: str, deadline: float) -> Outcome:
        self.completions += 1
        self.completed.append(host)
        return Outcome("", "", "", self.completions_ok, 0.05, "" if self.completions_ok else "502 Bad Gateway")

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def checked_harness(
    document: dict[str, Any], server: FakeApiServer | None = None, **frontend: Any
) -> tuple[Harness, FakeFrontend, Clock]:
    server = server or FakeApiServer(namespaces=(NAMESPACE,))
    created = server.create(copy.deepcopy(document), manager="kubectl-client-side-apply")
    name = created["metadata"]["name"]
    fake = FakeFrontend(server, name, **frontend)
    clock = Clock()
    kube = Kube(server)
    checker = ServingChecker(kube, fake, wall_clock=clock)
    reconciler = reconciler_for(server, kube=kube, serving=checker)
    return Harness(server, reconciler, name), fake, clock


def make_pod(
    deployment: str,
    name: str,
    role: str,
    *,
    ready: bool = True,
    gated: bool = False,
    revision: str = "",
    restarts: int = 0,
    ip: str = "10.0.0.1",
    template: str = "t1",
) -> dict[str, Any]:
    """A running pod of one role, as the kubelet would report it (the gate condition unset), controlled by the
    ReplicaSet `<deployment>-<role>-<template>` of the role's Deployment."""
    containers_ready = ready
    pod_ready = ready and not gated
    labels = {
        LABEL_DEPLOYMENT: deployment,
        "disagg.dev/role": role,
        LABEL_MANAGED_BY: MANAGED_BY,
        "pod-template-hash": template,
    }
    controller = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": f"{deployment}-{role}-{template}",
        "controller": True,
    }
    if revision:
        labels["disagg.dev/pairing-revision"] = revision
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels, "ownerReferences": [controller]},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            **({"readinessGates": [{"conditionType": SERVING_GATE}]} if gated else {}),
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {"type": "ContainersReady", "status": "True" if containers_ready else "False"},
                {"type": "Ready", "status": "True" if pod_ready else "False"},
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": containers_ready,
                    "restartCount": restarts,
                    "state": {"running": {"startedAt": NOW}},
                }
            ],
        },
    }


def create_pod(server: FakeApiServer, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """make_pod's pod, created in the fake API server under its ReplicaSet (see `controlled`)."""
    return server.create(controlled(server, make_pod(*args, **kwargs)))


def controlled(server: FakeApiServer, pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with the uid of the ReplicaSet its controller reference names, which is created if missing: controlled by
    the role's Deployment when that exists (the operator's own pod), else by nobody."""
    controller = pod["metadata"]["ownerReferences"][0]
    if server.get("ReplicaSet", NAMESPACE, controller["name"]) is None:
        deployment_name = controller["name"].removesuffix("-" + pod["metadata"]["labels"]["pod-template-hash"])
        deployment = server.get("Deployment", NAMESPACE, deployment_name)
        labels = {
            key: value for key, value in pod["metadata"]["labels"].items() if key != "disagg.dev/pairing-revision"
        }
        metadata: dict[str, Any] = {"name": controller["name"], "namespace": NAMESPACE, "labels": labels}
        if deployment is not None:
            reference = {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment_name, "controller": True}
            metadata["ownerReferences"] = [{**reference, "uid": deployment["metadata"]["uid"]}]
        server.create({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata, "spec": {}})
    replica_set = server.get("ReplicaSet", NAMESPACE, controller["name"])
    assert replica_set is not None
    controller["uid"] = replica_set["metadata"]["uid"]
    return pod


def kubelet(server: FakeApiServer) -> None:
    """What the kubelet does with readiness gates: a pod is Ready when its containers are and every gate is True."""
    for pod in server.objects("Pod", NAMESPACE):
        status = pod.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        gates = [g["conditionType"] for g in (pod.get("spec") or {}).get("readinessGates") or []]
        ready = conditions.get("ContainersReady", {}).get("status") == "True" and all(
            conditions.get(g, {}).get("status") == "True" for g in gates
        )
        conditions["Ready"] = {"type": "Ready", "status": "True" if ready else "False"}
        server.set_status(
            "Pod", NAMESPACE, pod["metadata"]["name"], {**status, "conditions": list(conditions.values())}
        )


def restart(server: FakeApiServer, name: str) -> None:
    pod = server.get("Pod", NAMESPACE, name)
    assert pod is not None
    status = copy.deepcopy(pod["status"])
    for container in status["containerStatuses"]:
        container["restartCount"] += 1
    server.set_status("Pod", NAMESPACE, name, status)
