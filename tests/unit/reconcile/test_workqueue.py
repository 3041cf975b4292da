"""The work queue: one worker per key, collapsing repeats, backoff on failure."""

from __future__ import annotations

import asyncio

from disagg.reconcile.workqueue import WorkQueue


async def test_repeated_requests_collapse() -> None:
    queue = WorkQueue()
    for _ in range(3):
        queue.add(("ns", "a"))
    queue.add(("ns", "b"))
    assert len(queue) == 2
    assert await queue.get() == ("ns", "a")
    assert await queue.get() == ("ns", "b")


async def test_a_key_is_never_processed_twice_at_once_but_is_redone_after() -> None:
    queue = WorkQueue()
    queue.add(("ns", "a"))
    key = await queue.get()
    queue.add(key)  # an event arrives while the key is being reconciled
    assert len(queue) == 0
    queue.done(key)
    assert len(queue) == 1 and await queue.get() == key


async def test_failures_back_off_exponentially_up_to_a_cap() -> None:
    queue = WorkQueue(base_delay=0.01, max_delay=0.04)
    key = ("ns", "a")
    delays = [queue.retry(key) for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    queue.forget(key)
    queue.succeeded(key)
    assert queue.retry(key) == 0.01
    await asyncio.sleep(0.05)
    assert len(queue) == 1
