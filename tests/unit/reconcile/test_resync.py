"""The reconciler's periodic resync re-queues every known DisaggDeployment (a missed watch event cannot hide drift
for longer than the resync period), and a pass knows which conflict its last status already reported."""

from __future__ import annotations

import asyncio

from disagg.reconcile.reconciler import _degraded_message
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import reconciler_for


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
