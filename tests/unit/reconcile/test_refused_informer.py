"""RBAC refusing the informers a child kind (D151): the operator stops waiting for that informer after the grace
period, reconciles every DisaggDeployment that does not need the kind, tells those that do (status, a Warning
event, the log at error level, a metric) which verb and which rule is missing, keeps asking, and recovers on its
own once the rule is granted. The real wiring (`operator.informers`, `operator.lead`) over the fake API server."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from disagg.names import DEPLOYMENT, DISAGG_DEPLOYMENT, KIND, LABEL_DEPLOYMENT
from disagg.reconcile import informer, metrics
from disagg.reconcile.cache import Cache
from disagg.reconcile.kube import Kube
from disagg.reconcile.operator import RunOptions, informers, lead
from disagg.reconcile.reconciler import Reconciler
from disagg.reconcile.refusals import Refusal, Refusals
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, NOW, deployment_document, harness

PEGAFLOW = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: pega}
spec:
  model: {name: Qwen/Qwen3-8B}
  engine: {pythonHashSeed: 42}
  kvCache:
    store:
      type: pegaflow
      pegaflow:
        server: {image: registry.example.com/pegaflow:0.25.1, poolSize: 30Gi}
  prefill: {replicas: 1}
  decode: {replicas: 1}
"""
RULE = "{apiGroups: [apps], resources: [daemonsets], verbs: [list, watch]}"


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer, "REFUSED_GRACE_S", 0.5)
    monkeypatch.setattr(informer, "BACKOFF_S", (0.05, 0.1, 0.2))


class Operator:
    """The reconciler, its informers and `lead` (no leader election) over one fake cluster, with kopf's part (the
    DisaggDeployments into the cache) done by hand."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.cache = Cache()
        self.reconciler = Reconciler(Kube(server), self.cache, clock=lambda: NOW, refusals=Refusals())
        self.watched = informers(Kube(server), self.cache, (), self.reconciler)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def create(self, text: str) -> str:
        created = self.server.create(copy.deepcopy(deployment_document(text)), manager="kubectl-client-side-apply")
        self.cache.put(DISAGG_DEPLOYMENT.name, created)
        self.reconciler.request((NAMESPACE, created["metadata"]["name"]))
        return str(created["metadata"]["name"])

    def start(self) -> None:
        self.tasks = [asyncio.create_task(i.run()) for i in self.watched]
        self.tasks.append(
            asyncio.create_task(lead(self.reconciler, None, self.watched, RunOptions(workers=2), self.stop))
        )

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks[:-1]:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def status(self, name: str) -> dict[str, Any]:
        found = self.server.get(KIND, NAMESPACE, name)
        assert found is not None
        return dict(found.get("status") or {})

    def degraded(self, name: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == "Degraded"), {})

    def children(self, name: str) -> list[str]:
        return sorted(
            obj["kind"]
            for kind in ("ServiceAccount", "Service", "Deployment", "DaemonSet")
            for obj in self.server.objects(kind, NAMESPACE)
            if (obj["metadata"].get("labels") or {}).get(LABEL_DEPLOYMENT) == name
        )

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.server.objects("Event", NAMESPACE)
            if e["involvedObject"]["name"] == name and e["reason"] == reason
        ]


async def until(what: str, check: Callable[[], bool], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def refused_gauge() -> float:
    return metrics.REGISTRY.get_sample_value("disagg_informer_refused", {"kind": "DaemonSet", "scope": ""}) or 0.0


async def test_a_refused_kind_is_reported_on_what_needs_it_and_the_rest_is_reconciled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    server.refuse("DaemonSet", "list", "watch")
    operator = Operator(server)
    minimal, pega = operator.create(MINIMAL), operator.create(PEGAFLOW)
    caplog.set_level(logging.DEBUG, logger="disagg.informer")
    operator.start()
    try:
        await until("pega reports the refusal", lambda: operator.degraded(pega).get("reason") == "AccessDenied")
        await until("the other one is reconciled", lambda: operator.status(minimal).get("observedGeneration") == 1)
        assert "Deployment" in operator.children(minimal)
        assert operator.children(pega) == []  # it cannot tell what exists, so nothing is written
        message = operator.degraded(pega)["message"]
        assert "may not list daemonsets.apps in all namespaces" in message
        assert RULE in message and "cannot list resource" in message  # the API server's own answer too
        assert operator.status(pega)["phase"] == "Degraded"
        assert "observedGeneration" not in operator.status(pega)  # this generation was not reconciled
        assert [e["type"] for e in operator.events(pega, "AccessDenied")] == ["Warning"]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and RULE in r.getMessage()]
        assert len(errors) == 1  # once, then again only every REMIND_S
        assert refused_gauge() == 1

        server.allow("DaemonSet")
        await until("pega is reconciled once the rule is granted", lambda: "DaemonSet" in operator.children(pega))
        await until("its status follows", lambda: operator.status(pega).get("observedGeneration") == 1)
        assert operator.degraded(pega)["reason"] != "AccessDenied"
        # Events follow the status they describe (Reconciler._publish): posted after it, so waited for.
        await until("the recovery's event", lambda: bool(operator.events(pega, "Recovered")))
        assert refused_gauge() == 0
        assert operator.reconciler.refusals.blocking(["DaemonSet"], NAMESPACE) == []
    finally:
        await operator.close()


async def test_a_refusal_shorter_than_the_grace_period_is_waited_out_silently() -> None:
    """RBAC created alongside the operator may take a moment to apply: that is not reported."""
    server = FakeApiServer(namespaces=(NAMESPACE,))
    server.refuse("DaemonSet", "list")
    operator = Operator(server)
    pega = operator.create(PEGAFLOW)
    operator.start()
    try:
        await asyncio.sleep(0.2)
        assert operator.status(pega) == {}  # still waiting for the DaemonSets' first list
        server.allow("DaemonSet")
        await until("pega is reconciled", lambda: operator.status(pega).get("observedGeneration") == 1)
        assert "DaemonSet" in operator.children(pega)
        assert operator.events(pega, "AccessDenied") == []
    finally:
        await operator.close()


async def test_a_refused_watch_is_reported_and_lists_keep_the_cache_current(caplog: pytest.LogCaptureFixture) -> None:
    """A list that works is enough to reconcile: nothing is blocked, but the log and the metric say what to grant,
    and changes are noticed by listing again at every retry."""
    server = FakeApiServer(namespaces=(NAMESPACE,))
    server.refuse("DaemonSet", "watch")
    operator = Operator(server)
    pega = operator.create(PEGAFLOW)
    caplog.set_level(logging.INFO, logger="disagg.informer")
    operator.start()
    try:
        await until("pega is reconciled", lambda: operator.status(pega).get("observedGeneration") == 1)
        await until("the refused watch is reported", lambda: refused_gauge() == 1)
        assert operator.degraded(pega).get("reason") != "AccessDenied"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("may not watch daemonsets.apps" in text and RULE in text for text in errors), errors
        server.remove("DaemonSet", NAMESPACE, "pega-kv-node")  # someone deletes it: a list notices, the pass restores
        await until("the DaemonSet is back", lambda: "DaemonSet" in operator.children(pega))
        server.allow("DaemonSet")
        await until("the watch is permitted again", lambda: refused_gauge() == 0)
    finally:
        await operator.close()


async def test_a_refusal_on_a_deployment_already_degraded_for_another_reason_gets_its_own_warning() -> None:
    """Degraded stays True, so no transition names the refusal: it is announced by an event of its own."""
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, "Deployment.apps is invalid", method="PATCH", kind="Deployment", reason="Invalid", times=None)
    assert await h.reconcile() == "retry"
    assert h.condition("Degraded")["status"] == "True" and h.condition("Degraded")["reason"] != "AccessDenied"
    h.reconciler.refusals.record(Refusal(DEPLOYMENT, None, "list", "deployments.apps is forbidden"))
    assert await h.reconcile() == "refused"
    assert h.condition("Degraded")["reason"] == "AccessDenied"
    [event] = h.events("AccessDenied")
    assert event["type"] == "Warning" and "may not list deployments.apps in all namespaces" in event["message"]
