"""Brief setup for the in-process reconciler tier: a fake cluster, the real reconciler reading it through the real
informers and cache, and controllers' moves."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from disagg.names import CHILD_KINDS, DISAGG_DEPLOYMENT, KIND, LABEL_DEPLOYMENT
from disagg.reconcile.cache import Cache, OwnerKey
from disagg.reconcile.informer import Informer
from disagg.reconcile.kube import Kube
from disagg.reconcile.operator import OBSERVED, OWNED_SELECTOR
from disagg.reconcile.reconciler import Reconciler
from disagg.reconcile.workqueue import Key
from tests.support.fake_kube import FakeApiServer

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
"""What the Deployment controller adds to each Deployment it rolls out."""


class Watching:
    """The operator's informers over a fake cluster, started on first use; `caught_up` waits until the cache has
    seen every write the fake has made (each watch sends a bookmark at the fake's current version when idle)."""

    def __init__(self, server: FakeApiServer, cache: Cache, on_change: Callable[[OwnerKey], None]) -> None:
        self.server = server
        kube = Kube(server)
        self.informers = [Informer(kube, cache, DISAGG_DEPLOYMENT, None, "", on_change)] + [
            Informer(kube, cache, kind, None, OWNED_SELECTOR, on_change, optional=kind in OBSERVED)
            for kind in (*CHILD_KINDS, *OBSERVED)
        ]
        self.tasks: list[asyncio.Task[None]] = []

    async def caught_up(self) -> None:
        if not self.tasks:
            self.tasks = [asyncio.create_task(informer.run()) for informer in self.informers]
        wanted = self.server.writes
        async with asyncio.timeout(10):
            while any(
                not informer.synced.is_set()
                or (not (informer.missing or informer.refused) and int(informer.version or 0) < wanted)
                for informer in self.informers
            ):
                await asyncio.sleep(0)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


class SyncedReconciler(Reconciler):
    """The real Reconciler, whose watch cache catches up with the fake cluster before every pass (in production
    the informers run all the time; here the test decides when the cluster has changed)."""

    watching: Watching

    async def reconcile(self, key: Key) -> str:
        await self.watching.caught_up()
        return await super().reconcile(key)


NAMESPACE = "ns"
NOW = "2026-01-01T00:00:00Z"


@dataclass
class Harness:
    """One fake cluster with one DisaggDeployment in it, reconciled by the real Reconciler."""

    server: FakeApiServer
    reconciler: Reconciler
    name: str
    namespace: str = NAMESPACE
    log: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    async def reconcile(self) -> str:
        outcome = await self.reconciler.reconcile(self.key)
        self.log.append(outcome)
        return outcome

    def owner(self) -> dict[str, Any]:
        found = self.server.get(KIND, self.namespace, self.name)
        assert found is not None
        return found

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.owner().get("status") or {}
        return status

    def condition(self, kind: str) -> dict[str, Any]:
        return next((c for c in self.status.get("conditions", []) if c["type"] == kind), {})

    def edit_spec(self, change: Callable[[dict[str, Any]], None]) -> None:
        """A user's change to the DisaggDeployment's spec (bumps its generation)."""
        self.server.update(KIND, self.namespace, self.name, lambda obj: change(obj["spec"]), manager="kubectl-edit")

    def children(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every object of a child kind carrying this DisaggDeployment's label, by (kind, name)."""
        return {
            (obj["kind"], obj["metadata"]["name"]): obj
            for kind in CHILD_KINDS
            for obj in self.server.objects(kind.name, self.namespace)
            if (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT) == self.name
        }

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.server.objects("Event", self.namespace) if reason is None or e["reason"] == reason]

    def forget_applied(self) -> None:
        """What a replica without a memory of its own does when the status holds no digest it can use (D192): the
        next pass applies every child again."""
        self.reconciler.applied.clear()
        self.server.set_status(
            KIND, self.namespace, self.name, {k: v for k, v in self.status.items() if k != "appliedDigest"}
        )

    def settle(self, **ready: int) -> None:
        """What the workload controllers and kubelets would report once every pod runs: each Deployment and
        LeaderWorkerSet fully ready on its current generation, and each Deployment annotated with its rollout's
        revision as the Deployment controller does. `ready` overrides the ready count by name."""
        for kind in ("Deployment", "LeaderWorkerSet"):
            for obj in self.server.objects(kind, self.namespace):
                name = obj["metadata"]["name"]
                replicas = obj["spec"].get("replicas", 1)
                status = {
                    "replicas": replicas,
                    "readyReplicas": ready.get(name, replicas),
                    "updatedReplicas": replicas,
                }
                if kind == "Deployment":
                    status["observedGeneration"] = obj["metadata"]["generation"]
                    if REVISION_ANNOTATION not in (obj["metadata"].get("annotations") or {}):
                        self.server.update(
                            kind,
                            self.namespace,
                            name,
                            lambda o: o["metadata"].setdefault("annotations", {}).update({REVISION_ANNOTATION: "1"}),
                            manager="kube-controller-manager",
                        )
                self.server.set_status(kind, self.namespace, name, status)


def deployment_document(text_or_path: str | Path, name: str | None = None) -> dict[str, Any]:
    text = text_or_path.read_text() if isinstance(text_or_path, Path) else text_or_path
    document: dict[str, Any] = yaml.safe_load(text)
    document["metadata"]["namespace"] = NAMESPACE
    if name is not None:
        document["metadata"]["name"] = name
    return document


def reconciler_for(
    server: FakeApiServer, instance: str = "test-instance", kube: Kube | None = None, **options: Any
) -> SyncedReconciler:
    """The real reconciler and its cache, fed by the real informers watching the fake cluster. `options`: more
    Reconciler arguments (e.g. the serving checker)."""
    cache = Cache()
    reconciler = SyncedReconciler(kube or Kube(server), cache, instance=instance, clock=lambda: NOW, **options)
    reconciler.watching = Watching(server, cache, lambda _owner: None)
    return reconciler


def harness(document: dict[str, Any], server: FakeApiServer | None = None) -> Harness:
    """A fake cluster holding `document` (created as a user would), and a reconciler for it."""
    server = server or FakeApiServer(namespaces=(NAMESPACE,))
    created = server.create(copy.deepcopy(document), manager="kubectl-client-side-apply")
    return Harness(server, reconciler_for(server), created["metadata"]["name"])


MINIMAL = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: m}
spec:
  model: {name: org/model}
  prefill: {replicas: 2}
  decode: {replicas: 1}
"""


def is_within(expected: Any, actual: Any) -> bool:
    """Whether every field of `expected` is in `actual` with the same value (the server may add more)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and is_within(v, actual[k]) for k, v in expected.items())
    return bool(expected == actual)


def assert_comes_back_after(h: Harness, started: float, delay: float) -> None:
    """The key's timer is set to fire `delay` seconds after some moment since `started` (the loop's clock, read
    before the pass): a loaded machine may stall the test past the timer, which must still not fire early."""
    due = h.reconciler.queue.due_in(h.key)
    assert due is not None and due <= delay
    assert asyncio.get_running_loop().time() + due >= started + delay - 0.01
