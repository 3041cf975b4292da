"""Client-side limits that protect the API server from the operator (D125): a token bucket on request starts (QPS
with a burst, as client-go's `--kube-api-qps`/`--kube-api-burst`) and a cap on requests in flight.

They wrap the Transport every reconcile worker shares, so the limits hold for the whole process however many
DisaggDeployments are reconciled at once. Watches are not limited (they are long-lived and few), and the leader
elector has a transport of its own, so a backlog of applies can never delay a lease renewal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from . import metrics
from .kube import Response, Transport


class TokenBucket:
    """Requests start at most `qps` per second on average, `burst` at once after a quiet spell. Waiters are
    served in the order they arrived (each reserves its slot when it asks)."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self._interval = 1.0 / qps
        self._tolerance = (burst - 1) * self._interval
        self._clock = clock
        self._next = clock()
        """The theoretical time the next request is due (GCRA): the bucket is full when it is in the past."""

    def reserve(self) -> float:
        """Take a token; returns how long to wait before using it."""
        now = self._clock()
        due = max(self._next, now)
        self._next = due + self._interval
        return max(0.0, due - now - self._tolerance)

    async def take(self) -> float:
        wait = self.reserve()
        if wait > 0:
            await asyncio.sleep(wait)
        return wait


class Throttled:
    """A Transport whose requests pass a token bucket and a cap on concurrent requests."""

    def __init__(self, inner: Transport, qps: float, burst: int, in_flight: int) -> None:
        self._inner = inner
        self._bucket = TokenBucket(qps, burst)
        self._slots = asyncio.Semaphore(in_flight)

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        started = time.monotonic()
        await self._bucket.take()
        async with self._slots:
            metrics.CLIENT_WAIT.observe(time.monotonic() - started)
            response = await self._inner.request(method, path, query, body, content_type)
        metrics.CLIENT_REQUESTS.labels(method, str(response.status)).inc()
        return response

    def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        return self._inner.watch(path, query)

    async def close(self) -> None:
        await self._inner.close()
