"""The reconciler's periodic resync re-queues every known DisaggDeployment (a missed watch event cannot hide drift
for longer than the resync period), and a pass knows which conflict its last status already reported."""

from __future__ import annotations

import asyncio
from typing import Any

from disagg.reconcile.kube import Response
from disagg.reconcile.metrics import REGISTRY
from disagg.reconcile.reconciler import _degraded_message
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness, reconciler_for


async def test_the_resync_queues_every_known_deployment_again() -> None:
    reconciler = reconciler_for(FakeApiServer(namespaces=("ns",)))
    keys = [("ns", "b"), ("ns", "a")]
    for key in keys:
        reconciler.request(key)
    assert sorted([await reconciler.queue.get(), await reconciler.queue.get()]) == sorted(keys)
    for key in keys:
        reconciler.queue.done(key)
    assert len(reconciler.queue) == 0
    stop = asyncio.Event()
    task = asyncio.create_task(reconciler._resync(0.01, stop))
    async with asyncio.timeout(5):
        while len(reconciler.queue) < 2:
            await asyncio.sleep(0.01)
    stop.set()
    await task
    assert sorted([await reconciler.queue.get(), await reconciler.queue.get()]) == sorted(keys)


def test_the_conflict_already_reported_is_the_true_degraded_condition_s_message() -> None:
    conditions = [
        {"type": "Ready", "status": "False", "message": "not this"},
        {"type": "Degraded", "status": "False", "message": "an old conflict"},
    ]
    assert _degraded_message({"status": {"conditions": conditions}}) == ""
    conditions.append({"type": "Degraded", "status": "True", "message": "Service x is not ours"})
    assert _degraded_message({"status": {"conditions": conditions}}) == "Service x is not ours"
    assert _degraded_message({}) == ""


async def test_a_forgotten_deployment_is_not_queued_again() -> None:
    """A deleted DisaggDeployment is forgotten: the resync and a new leader's full pass skip it."""
    reconciler = reconciler_for(FakeApiServer(namespaces=("ns",)))
    for key in (("ns", "a"), ("ns", "b")):
        reconciler.request(key)
    for _ in range(2):
        reconciler.queue.done(await reconciler.queue.get())
    reconciler.forget(("ns", "a"))
    reconciler.request_all()
    assert await reconciler.queue.get() == ("ns", "b")
    assert len(reconciler.queue) == 0


def phase_gauge() -> dict[str, float]:
    return {
        phase: REGISTRY.get_sample_value("disagg_deployments", {"phase": phase}) or 0.0
        for phase in ("Pending", "Progressing", "Ready", "Degraded", "Invalid")
    }


async def test_the_phase_gauge_counts_deployments_by_the_phase_their_status_reports() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    first = harness(deployment_document(MINIMAL), server)
    server.create(deployment_document(MINIMAL, name="second"), manager="kubectl-client-side-apply")
    reconciler = first.reconciler
    await reconciler.reconcile(first.key)
    await reconciler.reconcile((NAMESPACE, "second"))
    assert first.status["phase"] == "Pending"  # children made, no pod ready yet
    assert phase_gauge() == {"Pending": 2, "Progressing": 0, "Ready": 0, "Degraded": 0, "Invalid": 0}
    first.settle()
    await reconciler.reconcile(first.key)
    assert first.status["phase"] == "Ready"
    assert phase_gauge() == {"Pending": 1, "Progressing": 0, "Ready": 1, "Degraded": 0, "Invalid": 0}
    reconciler.forget((NAMESPACE, "second"))  # deleted
    assert phase_gauge() == {"Pending": 0, "Progressing": 0, "Ready": 1, "Degraded": 0, "Invalid": 0}


async def test_a_deployment_being_deleted_is_not_reconciled_and_its_children_are_not_written_again() -> None:
    """Deleted with a finalizer still on it (or in the foreground, while the garbage collector removes the children),
    a DisaggDeployment stays readable with a deletionTimestamp: the pass ends there and puts nothing back."""
    h = harness(deployment_document(MINIMAL))
    assert await h.reconcile() == "ok"
    h.server.update(
        "DisaggDeployment", NAMESPACE, "m", lambda d: d["metadata"].update(finalizers=["example.com/hold"]), "user"
    )
    h.server.remove("DisaggDeployment", NAMESPACE, "m")
    assert h.owner()["metadata"].get("deletionTimestamp")
    h.server.remove("Service", NAMESPACE, "m")  # the garbage collector's first deletions
    writes = len([r for r in h.server.requests if r.method != "GET"])
    assert await h.reconcile() == "gone"
    assert h.server.get("Service", NAMESPACE, "m") is None
    assert len([r for r in h.server.requests if r.method != "GET"]) == writes


class _SlowToLetGo(FakeApiServer):
    """An apply that hangs until cancelled, and then needs a few more turns of the loop to clean up (as a request
    whose connection is released does)."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.hanging = asyncio.Event()
        self.cleaned_up = False

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        if method == "PATCH" and not self.cleaned_up:
            self.hanging.set()
            try:
                await asyncio.sleep(3600)
            finally:
                for _ in range(3):
                    await asyncio.sleep(0)
                self.cleaned_up = True
        return await super().request(method, path, query, body, content_type)


async def test_when_run_returns_no_pass_is_left_running() -> None:
    """Stopping (the lease lost, the process told to end) cancels the workers and the resync and waits for them: once
    `run` returns, no pass of this replica is still writing, whoever leads next."""
    server = _SlowToLetGo()
    h = harness(deployment_document(MINIMAL), server)
    stop = asyncio.Event()
    h.reconciler.request(h.key)
    running = asyncio.create_task(h.reconciler.run(2, 3600.0, stop))
    async with asyncio.timeout(10):
        await server.hanging.wait()
    stop.set()
    await running
    assert server.cleaned_up
    assert not {"reconcile-0", "reconcile-1", "resync"} & {task.get_name() for task in asyncio.all_tasks()}
