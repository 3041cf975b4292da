"""HTTP client to the engines (shell): one pooled aiohttp session, per-leg deadlines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from .flows import Leg


class LegError(Exception):
    """A leg that produced no usable response: `reason` is timeout, connect or aborted."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class JsonReply:
    status: int
    data: Any
    raw: bytes
    content_type: str


def dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


class EngineClient:
    def __init__(self, connect_timeout: float, max_connections_per_engine: int) -> None:
        self._connect_timeout = connect_timeout
        self._limit = max_connections_per_engine
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._limit, keepalive_timeout=60, use_dns_cache=True)
        # No cookies, no decompression, no redirects to requote: the engines are plain HTTP/1.1 peers, and each of
        # these costs CPU on every leg.
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),
            requote_redirect_url=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("EngineClient.start() was not awaited")
        return self._session

    def _url(self, url: str) -> URL:
        """Parsed once per engine and path: yarl parsing is a visible share of a leg's CPU."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) > 4096:
                self._urls.clear()
            parsed = self._urls[url] = URL(url, encoded=True)
        return parsed

    def _timeout(self, deadline: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=max(deadline, 0.001), sock_connect=self._connect_timeout)

    async def post_json(self, leg: Leg, deadline: float, parse: bool = True) -> JsonReply:
        try:
            async with self.session.post(
                self._url(leg.url), data=dumps(leg.body), headers=leg.headers, timeout=self._timeout(deadline)
            ) as response:
                raw = await response.read()
                content_type = response.headers.get("Content-Type", "application/json")
        except TimeoutError as e:
            raise LegError("timeout", f"{leg.role} {leg.url} gave no answer within {deadline:.1f} s") from e
        except aiohttp.ClientConnectionError as e:
            raise LegError("connect", f"{leg.role} {leg.url}: {e}") from e
        data = None
        if parse and raw:
            try:
                data = json.loads(raw)
            except ValueError:
                data = None
        return JsonReply(response.status, data, raw, content_type)

    async def open(self, leg: Leg, deadline: float) -> aiohttp.ClientResponse:
        """A streaming response whose body the caller reads and then releases."""
        try:
            response = await self.session.post(
                self._url(leg.url), data=dumps(leg.body), headers=leg.headers, timeout=self._timeout(deadline)
            )
        except TimeoutError as e:
            raise LegError("timeout", f"{leg.role} {leg.url} gave no answer within {deadline:.1f} s") from e
        except aiohttp.ClientConnectionError as e:
            raise LegError("connect", f"{leg.role} {leg.url}: {e}") from e
        return response

    async def get(self, url: str, deadline: float) -> tuple[int, bytes]:
        try:
            async with self.session.get(url, timeout=self._timeout(deadline)) as response:
                return response.status, await response.read()
        except TimeoutError as e:
            raise LegError("timeout", f"GET {url} gave no answer within {deadline:.1f} s") from e
        except aiohttp.ClientConnectionError as e:
            raise LegError("connect", f"GET {url}: {e}") from e
