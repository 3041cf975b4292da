"""The work queue: one worker per key, collapsing repeats, backoff on failure."""

from __future__ import annotations

import asyncio

from disagg.reconcile.workqueue import CHANGE, EVENT, LANES, WorkQueue


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


async def test_of_two_timers_for_a_key_the_earlier_wins() -> None:
    queue = WorkQueue()
    key = ("ns", "a")
    queue.add_after(key, 60)
    queue.add_after(key, 1)  # a retry is not held back by a later resync
    due = queue.due_in(key)
    assert due is not None and 0.5 < due <= 1
    queue.add_after(key, 30)  # nor is an earlier timer pushed back
    due = queue.due_in(key)
    assert due is not None and due <= 1


async def test_a_queued_key_gets_no_timer_and_an_event_cancels_a_pending_one() -> None:
    queue = WorkQueue()
    key = ("ns", "a")
    queue.add_after(key, 5)
    queue.add(key)
    assert queue.due_in(key) is None and len(queue) == 1
    queue.add_after(key, 5)
    assert queue.due_in(key) is None


async def test_failures_count_until_success_and_the_delay_never_overflows() -> None:
    queue = WorkQueue(base_delay=1, max_delay=300)
    key = ("ns", "a")
    for _ in range(2000):  # a week of failures at the cap
        delay = queue.retry(key)
    assert delay == 300 and queue.failures(key) == 2000
    queue.succeeded(key)
    assert queue.failures(key) == 0 and queue.backoff(key) == 1


async def test_forget_cancels_the_timer_and_the_count() -> None:
    queue = WorkQueue(base_delay=0.01)
    key = ("ns", "a")
    queue.retry(key)
    queue.forget(key)
    assert queue.due_in(key) is None and queue.failures(key) == 0
    await asyncio.sleep(0.03)
    assert len(queue) == 0


async def test_changes_go_ahead_of_revisits_and_a_revisited_key_that_changes_is_moved_up() -> None:
    """A resync queues every key at once; a change arriving behind them must not wait for all of them (D153)."""
    queue = WorkQueue()
    for name in ("a", "b", "c"):
        queue.add(("ns", name), revisit=True)
    queue.add(("ns", "new"))
    queue.add(("ns", "c"))  # c changes while waiting for its revisit
    queue.add(("ns", "new"), revisit=True)  # a revisit never moves a key back
    assert len(queue) == 4
    assert [await queue.get() for _ in range(4)] == [("ns", "new"), ("ns", "c"), ("ns", "a"), ("ns", "b")]


async def test_a_change_to_a_key_in_its_pass_is_redone_ahead_of_revisits() -> None:
    queue = WorkQueue()
    queue.add(("ns", "a"))
    key = await queue.get()
    queue.add(("ns", "b"), revisit=True)
    queue.add(key, revisit=True)
    queue.add(key)  # the change wins over the revisit
    queue.done(key)
    assert await queue.get() == key
    assert await queue.get() == ("ns", "b")


async def test_a_worker_waiting_on_an_empty_queue_wakes_for_either_lane() -> None:
    queue = WorkQueue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add(("ns", "a"), revisit=True)
    async with asyncio.timeout(1):
        assert await waiting == ("ns", "a")


async def test_an_urgent_key_goes_ahead_of_events_and_revisits_queued_before_it() -> None:
    """A user's change must not wait for the passes a burst or a resync queued (D210)."""
    urgent = {("ns", "changed")}
    queue = WorkQueue(urgent=lambda key: key in urgent)
    queue.add(("ns", "r"), revisit=True)
    queue.add(("ns", "e1"))
    queue.add(("ns", "e2"))
    queue.add(("ns", "changed"), revisit=True)  # urgent however it is asked for
    taken = [await queue.take() for _ in range(4)]
    assert [(t.key[1], LANES[t.lane]) for t in taken] == [
        ("changed", "change"),
        ("e1", "event"),
        ("e2", "event"),
        ("r", "revisit"),
    ]


async def test_a_waiting_key_that_becomes_urgent_moves_up_and_keeps_the_time_it_was_first_asked() -> None:
    now = [100.0]
    urgent: set[tuple[str, str]] = set()
    queue = WorkQueue(urgent=lambda key: key in urgent, clock=lambda: now[0])
    queue.add(("ns", "a"))
    queue.add(("ns", "b"), revisit=True)
    now[0] = 103.0
    urgent.add(("ns", "b"))  # its spec changed while it waited for its revisit
    queue.add(("ns", "b"))
    assert queue.lane_of(("ns", "b")) == CHANGE and len(queue) == 2
    now[0] = 110.0
    first = await queue.take()
    assert (first.key, first.lane, first.waited) == (("ns", "b"), CHANGE, 10.0)
    second = await queue.take()
    assert (second.key, second.lane, second.waited) == (("ns", "a"), EVENT, 10.0)


async def test_urgency_is_asked_again_when_a_key_asked_for_during_its_pass_is_redone() -> None:
    """The pass that observes the generation ends the key's urgency: what it was asked for meanwhile (a child's
    report) waits in its own lane; a spec changed again during the pass goes first again."""
    urgent = {("ns", "a"), ("ns", "b")}
    queue = WorkQueue(urgent=lambda key: key in urgent)
    queue.add(("ns", "a"))
    queue.add(("ns", "b"))
    a = await queue.get()
    b = await queue.get()
    queue.add(("ns", "x"))
    queue.add(a)
    queue.add(b, revisit=True)
    urgent.discard(a)  # a's pass observed its generation; b's did not (changed again during it)
    queue.done(a)
    queue.done(b)
    assert queue.lane_of(a) == EVENT and queue.lane_of(b) == CHANGE
    assert [await queue.get() for _ in range(3)] == [b, ("ns", "x"), a]


async def test_urgency_is_not_asked_for_a_key_already_first() -> None:
    asked: list[tuple[str, str]] = []

    def urgent(key: tuple[str, str]) -> bool:
        asked.append(key)
        return True

    queue = WorkQueue(urgent=urgent)
    for _ in range(3):
        queue.add(("ns", "a"))
    assert asked == [("ns", "a")] and len(queue) == 1


async def test_the_wait_of_keys_queued_before_the_workers_started_counts_from_their_start() -> None:
    now = [0.0]
    queue = WorkQueue(clock=lambda: now[0])
    queue.add(("ns", "a"))  # a standby: its watches report, no worker takes anything
    now[0] = 50.0
    queue.restamp()  # it leads now
    queue.add(("ns", "b"))
    now[0] = 52.0
    assert [(t.key[1], t.waited) for t in [await queue.take(), await queue.take()]] == [("a", 2.0), ("b", 2.0)]
