"""Scrape every ready API pod's vLLM /metrics and turn two consecutive scrapes into a window."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.pool import PoolName
from disagg.scaling.snapshot import Observation, PoolSnapshot

from .pods import pool_pods
from .promtext import parse_scrape
from .window import PodSample, pool_snapshot

SCRAPE_TIMEOUT_S = 3.0


class DirectSource:
    """Keeps each pod's previous scrape in memory; a pod seen for the first time contributes from its second."""

    def __init__(self, port: int = ENGINE_HTTP_PORT) -> None:
        self._port = port
        self._previous: dict[tuple[str, str, str], PodSample] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _fetch(self, ip: str) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S))
        async with self._session.get(f"http://{ip}:{self._port}/metrics", allow_redirects=False) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            return await response.text()

    async def observe(
        self, namespace: str, name: str, pods: list[dict[str, Any]], now: float, window_s: float
    ) -> Observation:
        """`window_s` is not used: the window is the time between this scrape and each pod's previous one."""
        prefill, decode = await asyncio.gather(
            self._pool(namespace, name, "prefill", pods, now), self._pool(namespace, name, "decode", pods, now)
        )
        return Observation(prefill=prefill, decode=decode)

    async def _pool(
        self, namespace: str, name: str, pool: PoolName, pods: list[dict[str, Any]], now: float
    ) -> PoolSnapshot:
        members = pool_pods(pods, pool)
        texts = await asyncio.gather(*(self._fetch(ip) for _, ip in members.ready), return_exceptions=True)
        samples: list[tuple[PodSample, PodSample | None]] = []
        unanswered = []
        for (pod, _), text in zip(members.ready, texts, strict=True):
            key = (namespace, name, pod)
            if isinstance(text, BaseException):
                unanswered.append(pod)
                continue
            try:
                current = PodSample(pod, now, parse_scrape(text))
            except ValueError:
                unanswered.append(pod)
                continue
            samples.append((current, self._previous.get(key)))
            self._previous[key] = current
        self._forget_gone(namespace, name, pool, {pod for pod, _ in members.ready})
        return pool_snapshot(pool, now, samples, len(members.ready), members.starting, unanswered)

    def _forget_gone(self, namespace: str, name: str, pool: PoolName, alive: set[str]) -> None:
        prefix = f"{name}-{pool}-"
        for key in [k for k in self._previous if k[0] == namespace and k[1] == name and k[2].startswith(prefix)]:
            if key[2] not in alive:
                del self._previous[key]

    def forget(self, namespace: str, name: str) -> None:
        for key in [k for k in self._previous if k[0] == namespace and k[1] == name]:
            del self._previous[key]
