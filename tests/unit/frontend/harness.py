"""Run the frontend against simulated engines (e2e/pdsim.py) in the test's event loop."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp import web
from e2e.pdsim import Fabric, SimEngine, serve_engines

from disagg.frontend.app import static_engines
from disagg.frontend.config import FrontendConfig
from disagg.frontend.contract import Engine
from disagg.frontend.server import Frontend


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    frontend: Frontend
    url: str
    prefills: list[SimEngine]
    decodes: list[SimEngine]
    session: aiohttp.ClientSession

    async def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        async with self.session.post(self.url + path, json=body, headers=headers or {}) as r:
            raw = await r.read()
            try:
                data: Any = await r.json(content_type=None)
            except ValueError:
                data = raw.decode()
            return r.status, data, dict(r.headers)

    async def stream(self, path: str, body: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
        async with self.session.post(self.url + path, json=body) as r:
            return r.status, await r.read(), dict(r.headers)


def sim_engines(
    connector: str, prefills: int = 1, decodes: int = 1, fabric: Fabric | None = None, **options: Any
) -> tuple[list[SimEngine], list[SimEngine]]:
    fabric = fabric or Fabric()
    ports = iter(range(0, 1000))

    def make(role: str, i: int) -> SimEngine:
        n = next(ports)
        kw = dict(options)
        if connector == "moriio":
            kw.update(moriio_handshake_port=free_port(), moriio_notify_port=free_port())
        if connector == "mooncake":
            kw.update(bootstrap_port=free_port())
        return SimEngine(
            fabric,
            role,
            connector,
            engine_id=f"{role}-{i}",
            side_channel_port=20000 + n,
            **kw,  # type: ignore[arg-type]
        )

    return [make("prefill", i) for i in range(prefills)], [make("decode", i) for i in range(decodes)]


def engines_for(
    prefills: list[SimEngine], decodes: list[SimEngine], revisions: dict[str, str] | None = None
) -> list[Engine]:
    revisions = revisions or {}
    specs = []
    for role, sims in (("prefill", prefills), ("decode", decodes)):
        for sim in sims:
            spec = (
                f"http://127.0.0.1:{sim.http_port},engine-id={sim.engine_id},side-channel-port={sim.side_channel_port}"
            )
            spec += (
                f",handshake-port={sim.moriio_handshake_port},notify-port={sim.moriio_notify_port},name={sim.engine_id}"
                f",bootstrap-port={sim.bootstrap_port}"
            )
            if sim.engine_id in revisions:
                spec += f",revision={revisions[sim.engine_id]}"
            specs.append((role, spec))
    return static_engines(tuple(s for r, s in specs if r == "prefill"), tuple(s for r, s in specs if r == "decode"), ())


@contextlib.asynccontextmanager
async def stack(
    config: FrontendConfig,
    prefills: list[SimEngine],
    decodes: list[SimEngine],
    engines: list[Engine] | None = None,
    clock: Any = None,
    revisions: dict[str, str] | None = None,
) -> AsyncIterator[Stack]:
    async for _ in serve_engines([*prefills, *decodes]):
        kwargs = {"clock": clock} if clock is not None else {}
        frontend = Frontend(config, **kwargs)
        frontend.set_engines(engines if engines is not None else engines_for(prefills, decodes, revisions))
        await frontend.start()
        runner = frontend.runner(admin=True)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        async with aiohttp.ClientSession() as session:
            try:
                yield Stack(frontend, f"http://127.0.0.1:{port}", prefills, decodes, session)
            finally:
                await runner.cleanup()
                await frontend.close()
        break


def config(**changes: Any) -> FrontendConfig:
    return replace(FrontendConfig(), **changes)
