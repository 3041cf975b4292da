"""The serving check's HTTP calls (shell): the frontend's admin API, or one completion through an endpoint.

The operator talks to pod IPs directly, as the metrics scraper does: the admin port is never behind a Service, so
only the operator (and whoever else can reach pod IPs) can probe or drain pairs.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from disagg.health.verdict import Outcome

EXTRA_SECONDS = 15.0
"""Allowed beyond the round's deadline for the frontend's own answer (it reports per-pair timeouts itself): its two
scrapes of decode's /metrics (5 s each, frontend/server.py PROBE_SCRAPE_SECONDS) and a margin. With only 5 s a loaded
node's frontend, still scraping, was reported as not answering (CheckFailed) instead of naming the slow pair."""


class ProbeError(Exception):
    """The check could not run: the frontend did not answer, or answered something else than its API."""


@dataclass(frozen=True)
class PairRef:
    prefill: str
    decode: str
    revision: str
    drained: bool
    candidate: bool


class Prober(Protocol):
    async def pairs(self, host: str, port: int) -> list[PairRef]: ...

    async def probe(self, host: str, port: int, pairs: list[PairRef], deadline: float) -> list[Outcome]: ...

    async def drain(self, host: str, port: int, prefill: str, decode: str, seconds: float, reason: str) -> None: ...

    async def undrain(self, host: str, port: int, prefill: str, decode: str) -> None: ...

    async def complete(self, host: str, port: int, model: str, deadline: float) -> Outcome: ...

    async def close(self) -> None: ...


def _url(host: str, port: int, path: str) -> str:
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


class HttpProber:
    """aiohttp, one session for every DisaggDeployment."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(self, method: str, url: str, body: Any, timeout: float) -> Any:
        try:
            async with self._client().request(
                method, url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                text = await response.text()
                if response.status != 200:
                    raise ProbeError(f"{method} {url} answered {response.status}: {text[:300]}")
                return json.loads(text)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ProbeError(f"{method} {url}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc

    async def pairs(self, host: str, port: int) -> list[PairRef]:
        data = await self._call("GET", _url(host, port, "/disagg/v1/pairs?candidates=true"), None, 10.0)
        try:
            return [
                PairRef(
                    str(p["prefill"]),
                    str(p["decode"]),
                    str(p.get("revision", "")),
                    bool(p.get("drained")),
                    bool(p.get("candidate")),
                )
                for p in data["pairs"]
            ]
        except (KeyError, TypeError) as exc:
            raise ProbeError(f"the frontend's pair list is not what the operator expects: {exc!r}") from exc

    async def probe(self, host: str, port: int, pairs: list[PairRef], deadline: float) -> list[Outcome]:
        if not pairs:
            return []
        body = {
            "pairs": [{"prefill": p.prefill, "decode": p.decode} for p in pairs],
            "deadline_seconds": deadline,
        }
        data = await self._call("POST", _url(host, port, "/disagg/v1/probe"), body, deadline + EXTRA_SECONDS)
        by_pair = {(p.prefill, p.decode): p for p in pairs}
        try:
            outcomes = []
            for result in data["results"]:
                ref = by_pair.get((result["prefill"], result["decode"]))
                outcomes.append(
                    Outcome(
                        prefill=str(result["prefill"]),
                        decode=str(result["decode"]),
                        revision=str(result.get("revision", "")),
                        ok=bool(result["ok"]),
                        latency=float(result.get("latency_seconds") or 0.0),
                        error=str(result.get("error") or "")
                        + (f" (status {result['status']})" if result.get("status") not in (None, 200) else ""),
                        kv_transferred=result.get("kv_transferred"),
                        candidate=bool(result.get("candidate", ref.candidate if ref else False)),
                        drained=bool(ref.drained) if ref else False,
                    )
                )
            return outcomes
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"the frontend's probe answer is not what the operator expects: {exc!r}") from exc

    async def drain(self, host: str, port: int, prefill: str, decode: str, seconds: float, reason: str) -> None:
        body = {"prefill": prefill, "decode": decode, "seconds": seconds, "reason": reason[:500]}
        await self._call("POST", _url(host, port, "/disagg/v1/drain"), body, 10.0)

    async def undrain(self, host: str, port: int, prefill: str, decode: str) -> None:
        await self._call("POST", _url(host, port, "/disagg/v1/undrain"), {"prefill": prefill, "decode": decode}, 10.0)

    async def complete(self, host: str, port: int, model: str, deadline: float) -> Outcome:
        """One tiny completion through an endpoint that cannot probe pairs (vllm-router, a custom router, decode)."""
        nonce = uuid.uuid4().hex
        body = {"model": model, "prompt": f"{nonce} disagg serving check {nonce}", "max_tokens": 2, "temperature": 0}
        started = time.monotonic()
        try:
            await self._call("POST", _url(host, port, "/v1/completions"), body, deadline)
        except ProbeError as exc:
            return Outcome("", "", "", False, time.monotonic() - started, str(exc))
        return Outcome("", "", "", True, time.monotonic() - started)
