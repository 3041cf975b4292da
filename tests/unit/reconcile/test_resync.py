"""The reconciler's periodic resync re-queues every known DisaggDeployment (a missed watch event cannot hide drift
for longer than the resync period), and a pass knows which conflict its last status already reported."""

from __future__ import annotations

import asyncio

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
