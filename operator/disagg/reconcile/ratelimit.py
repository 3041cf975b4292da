"""Client-side limits that protect the API server from the operator (D125): a token bucket on request starts (QPS
with a burst, as client-go's `--kube-api-qps`/`--kube-api-burst`) and a cap on requests in flight.

They wrap the Transport every reconcile worker shares, so the limits hold for the whole process however many
DisaggDeployments are reconciled at once. A pass of the change lane (a spec nobody reconciled yet) marks its requests
urgent (`priority.urgent_requests`): they are let through both limits before the others waiting (D245), so a user's
change made during a burst's aftermath does not wait in these limits behind the status-only passes of a thousand
others (it still shares the event loop with them: docs/performance.md). Watches
are not limited (they are long-lived and few), and the leader elector has a transport of its own, so a backlog of
applies can never delay a lease renewal.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from . import metrics
from .kube import Response, Transport
from .priority import URGENT


def _waiting(queue: deque[asyncio.Future[None]]) -> bool:
    """Whether a live waiter is queued; drops the cancelled ones at the head (amortised O(1))."""
    while queue and queue[0].done():
        queue.popleft()
    return bool(queue)


class _Waiters:
    """Futures waiting for a grant, urgent ones first, each class in arrival order."""

    def __init__(self) -> None:
        self._queues: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (deque(), deque())

    def add(self, urgent: bool) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues[0 if urgent else 1].append(waiter)
        return waiter

    def ahead_of(self, urgent: bool) -> bool:
        """Whether someone would be served before a newcomer of this class."""
        return _waiting(self._queues[0]) or (not urgent and _waiting(self._queues[1]))

    def grant_one(self) -> bool:
        for queue in self._queues:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():  # a cancelled waiter gave up its place
                    waiter.set_result(None)
                    return True
        return False

    def any(self) -> bool:
        return self.ahead_of(False)


class TokenBucket:
    """Requests start at most `qps` per second on average, `burst` at once after a quiet spell. Waiters are
    served urgent ones first (D245), each class in the order it arrived."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self._interval = 1.0 / qps
        self._tolerance = (burst - 1) * self._interval
        self._clock = clock
        self._next = clock()
        """The theoretical time the next request is due (GCRA): the bucket is full when it is in the past."""
        self._waiters = _Waiters()
        self._timer: asyncio.TimerHandle | None = None

    def _delay(self, now: float) -> float:
        """How long until a token is free (0: one is free now)."""
        return max(0.0, max(self._next, now) - now - self._tolerance)

    def _consume(self, now: float) -> None:
        self._next = max(self._next, now) + self._interval

    async def take(self, urgent: bool = False) -> float:
        """Wait for a token: at once if one is free and nobody who goes first waits; returns the seconds waited."""
        now = self._clock()
        if self._delay(now) == 0 and not self._waiters.ahead_of(urgent):
            self._consume(now)
            return 0.0
        waiter = self._waiters.add(urgent)
        self._schedule(now)
        await waiter
        return self._clock() - now

    def _schedule(self, now: float) -> None:
        if self._timer is None and self._waiters.any():
            self._timer = asyncio.get_running_loop().call_later(self._delay(now), self._grant)

    def _grant(self) -> None:
        self._timer = None
        now = self._clock()
        while self._delay(now) == 0 and self._waiters.grant_one():
            self._consume(now)
        self._schedule(now)


class Slots:
    """At most `size` holders at once; waiters are let in urgent ones first, each class in arrival order."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._free = size
        self._waiters = _Waiters()

    async def acquire(self, urgent: bool = False) -> None:
        if self._free > 0 and not self._waiters.ahead_of(urgent):
            self._free -= 1
            return
        waiter = self._waiters.add(urgent)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as it was cancelled: pass the slot on
            raise

    def release(self) -> None:
        if not self._waiters.grant_one():
            self._free += 1


class Throttled:
    """A Transport whose requests pass a token bucket and a cap on concurrent requests."""

    def __init__(self, inner: Transport, qps: float, burst: int, in_flight: int) -> None:
        self._inner = inner
        self._bucket = TokenBucket(qps, burst)
        self._slots = Slots(in_flight)

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        started = time.monotonic()
        urgent = URGENT.get()
        await self._bucket.take(urgent)
        await self._slots.acquire(urgent)
        try:
            metrics.CLIENT_WAIT.labels("urgent" if urgent else "normal").observe(time.monotonic() - started)
            response = await self._inner.request(method, path, query, body, content_type)
        finally:
            self._slots.release()
        metrics.CLIENT_REQUESTS.labels(method, str(response.status)).inc()
        return response

    def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        return self._inner.watch(path, query)

    async def close(self) -> None:
        await self._inner.close()
