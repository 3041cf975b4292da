"""The client-side limits: a burst goes at once, then requests are spaced at the QPS; in-flight requests are
capped (decision D125)."""

from __future__ import annotations

import asyncio
from typing import Any

from disagg.reconcile.kube import Response
from disagg.reconcile.priority import urgent_requests
from disagg.reconcile.ratelimit import Slots, Throttled, TokenBucket


async def _started_at_once(bucket: TokenBucket, count: int) -> list[bool]:
    """Which of `count` takes, asked one after another, got a token without waiting for the bucket's timer."""
    tasks = [asyncio.ensure_future(bucket.take()) for _ in range(count)]
    await asyncio.sleep(0)  # each take runs to its first wait; the immediate ones are done
    done = [task.done() for task in tasks]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return done


async def test_a_full_bucket_lets_the_burst_through_then_spaces_requests_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=5, clock=lambda: now[0])
    assert await _started_at_once(bucket, 8) == [True] * 5 + [False] * 3
    now[0] += 0.1  # one interval: one more token
    assert await _started_at_once(bucket, 2) == [True, False]
    now[0] += 10  # a quiet spell refills it, but never above the burst
    assert await _started_at_once(bucket, 6) == [True] * 5 + [False]


class Slow:
    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0

    async def request(self, method: str, path: str, query: Any, body: Any, content_type: str) -> Response:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return Response(200, "OK", b"{}")

    def watch(self, path: str, query: Any) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        return None


async def test_requests_in_flight_never_exceed_the_cap() -> None:
    inner = Slow()
    throttled = Throttled(inner, qps=100000, burst=1000, in_flight=3)
    await asyncio.gather(*(throttled.request("GET", "/x", [], None, "application/json") for _ in range(20)))
    assert inner.most == 3


async def _granted_in_order(bucket: TokenBucket, who: list[tuple[str, bool]]) -> list[str]:
    order: list[str] = []

    async def taker(name: str, urgent: bool) -> None:
        await bucket.take(urgent)
        order.append(name)

    tasks = []
    for name, urgent in who:
        tasks.append(asyncio.create_task(taker(name, urgent)))
        await asyncio.sleep(0)  # each asks in turn
    await asyncio.gather(*tasks)
    return order


async def test_urgent_requests_take_the_next_tokens_ahead_of_those_already_waiting() -> None:
    """D245: a pass of the change lane must not queue behind the event lane's backlog in the bucket."""
    bucket = TokenBucket(qps=200, burst=1)
    await bucket.take()  # the bucket is empty now: everyone below waits
    order = await _granted_in_order(
        bucket, [("n1", False), ("n2", False), ("n3", False), ("u1", True), ("n4", False), ("u2", True)]
    )
    assert order == ["u1", "u2", "n1", "n2", "n3", "n4"]


async def test_the_bucket_still_spaces_every_request_at_its_rate_whatever_the_priority() -> None:
    bucket = TokenBucket(qps=50, burst=1)
    await bucket.take()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(bucket.take(urgent=i % 2 == 0) for i in range(6)))
    assert loop.time() - started >= 6 / 50 * 0.9  # six more tokens at 50/s: no class gets extra ones


async def test_a_waiter_that_gives_up_does_not_hold_back_the_others() -> None:
    bucket = TokenBucket(qps=100, burst=1)
    await bucket.take()
    gone = asyncio.create_task(bucket.take(urgent=True))
    await asyncio.sleep(0)
    gone.cancel()
    async with asyncio.timeout(1):
        assert await bucket.take() < 0.5


async def test_a_freed_slot_goes_to_an_urgent_waiter_first_and_none_is_lost_to_cancellation() -> None:
    slots = Slots(1)
    await slots.acquire()
    order: list[str] = []

    async def holder(name: str, urgent: bool) -> None:
        await slots.acquire(urgent)
        order.append(name)
        await asyncio.sleep(0)
        slots.release()

    normal = [asyncio.create_task(holder(f"n{i}", False)) for i in range(3)]
    await asyncio.sleep(0)
    quitter = asyncio.create_task(slots.acquire(urgent=True))
    urgent = asyncio.create_task(holder("u", True))
    await asyncio.sleep(0)
    quitter.cancel()
    slots.release()
    await asyncio.gather(*normal, urgent)
    assert order == ["u", "n0", "n1", "n2"]
    await slots.acquire()  # the one slot is free again: nothing leaked to the cancelled waiter
    slots.release()


class Recording(Slow):
    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    async def request(self, method: str, path: str, query: Any, body: Any, content_type: str) -> Response:
        self.paths.append(path)
        return await super().request(method, path, query, body, content_type)


async def test_requests_made_in_an_urgent_pass_and_its_tasks_go_first() -> None:
    inner = Recording()
    throttled = Throttled(inner, qps=100000, burst=1000, in_flight=1)

    def get(path: str) -> Any:
        return throttled.request("GET", path, [], None, "application/json")

    backlog = [asyncio.create_task(get(f"/event/{i}")) for i in range(4)]
    await asyncio.sleep(0)

    async def change_lane_pass() -> None:
        with urgent_requests():
            await asyncio.gather(get("/change/a"), get("/change/b"))  # children applied concurrently

    await asyncio.gather(change_lane_pass(), *backlog)
    assert inner.paths[0] == "/event/0"  # already in flight when the change arrived
    assert inner.paths[1:3] == ["/change/a", "/change/b"]
    assert inner.paths[3:] == ["/event/1", "/event/2", "/event/3"]
