"""The client-side limits: a burst goes at once, then requests are spaced at the QPS; in-flight requests are
capped (decision D125)."""

from __future__ import annotations

import asyncio
from typing import Any

from disagg.reconcile.kube import Response
from disagg.reconcile.ratelimit import Throttled, TokenBucket


def test_a_full_bucket_lets_the_burst_through_then_spaces_requests_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=5, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(5)] == [0.0] * 5
    waits = [bucket.reserve() for _ in range(3)]
    assert [round(w, 6) for w in waits] == [0.1, 0.2, 0.3]
    now[0] += 10  # a quiet spell refills it, but never above the burst
    assert [round(bucket.reserve(), 6) for _ in range(6)] == [0.0] * 5 + [0.1]


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
