"""Which DisaggDeployments the work queue takes first: a spec no finished pass has observed (D210), and the
reconciler putting them there from its watch cache."""

from __future__ import annotations

import asyncio
from typing import Any

from disagg.reconcile.priority import URGENT
from disagg.reconcile.urgency import awaits_pass
from disagg.reconcile.workqueue import CHANGE, EVENT, LANES, REVISIT
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness


def owner(generation: int | None, observed: int | None = None, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "a", "namespace": "ns"}
    if generation is not None:
        metadata["generation"] = generation
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "status": {} if observed is None else {"observedGeneration": observed}}


def test_a_spec_awaits_its_pass_until_the_status_observes_its_generation() -> None:
    assert awaits_pass(owner(1))  # just created: no status yet
    assert awaits_pass({"metadata": {"name": "a", "generation": 1}})  # no status key at all
    assert not awaits_pass(owner(1, observed=1))
    assert awaits_pass(owner(2, observed=1))  # the spec changed since


def test_what_is_not_a_spec_waiting_for_a_pass_is_not_urgent() -> None:
    assert not awaits_pass(None)  # not in the cache: its own event requests it
    assert not awaits_pass(owner(2, observed=1, deleting=True))  # its pass only forgets it
    assert not awaits_pass(owner(None))


async def test_the_reconciler_takes_a_changed_deployment_before_the_passes_queued_ahead_of_it() -> None:
    """Settled DisaggDeployments asked for by their children's reports and by the resync wait behind one whose spec
    a user just changed, and behind one just created; once their passes observed them, they are not urgent."""
    first = harness(deployment_document(MINIMAL, name="first"))
    server, reconciler = first.server, first.reconciler
    for name in ("second", "third"):
        server.create(deployment_document(MINIMAL, name=name), manager="kubectl-client-side-apply")
    keys = {name: (NAMESPACE, name) for name in ("first", "second", "third", "new")}
    for name in ("first", "second", "third"):
        assert await reconciler.reconcile(keys[name]) == "ok"
    for name in ("first", "second", "third"):
        reconciler.request(keys[name])  # children's reports, settled specs
    reconciler.request_all()
    assert [reconciler.queue.lane_of(keys[n]) for n in ("first", "second", "third")] == [EVENT] * 3

    first.edit_spec(lambda spec: spec["decode"].update(replicas=2))
    server.create(deployment_document(MINIMAL, name="new"), manager="kubectl-client-side-apply")
    await reconciler.watching.caught_up()  # the cache sees the change and the new one, as kopf's event would
    reconciler.request(keys["new"])
    reconciler.request(keys["first"])
    order = [await reconciler.queue.take() for _ in range(4)]
    assert [(t.key[1], LANES[t.lane]) for t in order] == [
        ("new", "change"),
        ("first", "change"),  # moved up from the event lane when its change was reported
        ("second", "event"),
        ("third", "event"),
    ]
    for taken in order:
        assert await reconciler.reconcile(taken.key) == "ok"
        reconciler.queue.done(taken.key)
    reconciler.request_all()
    assert {reconciler.queue.lane_of(key) for key in keys.values()} == {REVISIT}
    assert CHANGE not in {reconciler.queue.lane_of(key) for key in keys.values()}


async def test_a_change_lane_pass_makes_urgent_requests_and_the_others_do_not() -> None:
    """D245: the worker marks the pass, so the client's limits let its requests through first."""
    settled = harness(deployment_document(MINIMAL, name="settled"))
    server, reconciler = settled.server, settled.reconciler
    assert await reconciler.reconcile(settled.key) == "ok"
    server.create(deployment_document(MINIMAL, name="new"), manager="kubectl-client-side-apply")
    await reconciler.watching.caught_up()
    marks: dict[str, bool] = {}
    process = reconciler.process

    async def marked(key: tuple[str, str]) -> float | None:
        marks[key[1]] = URGENT.get()
        return await process(key)

    reconciler.process = marked  # type: ignore[method-assign]
    reconciler.request(settled.key)
    reconciler.request((NAMESPACE, "new"))
    stop = asyncio.Event()
    runner = asyncio.create_task(reconciler.run(workers=1, resync_seconds=3600, stop=stop))
    try:
        async with asyncio.timeout(10):
            while len(marks) < 2:
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await runner
    assert marks == {"new": True, "settled": False}
    assert not URGENT.get()  # nothing leaks out of the pass
