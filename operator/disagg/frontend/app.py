"""Wiring (shell): settings -> frontend, engine source, HTTP servers; runs until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from typing import Any

import uvloop
from aiohttp import web

from disagg.names import LABEL_DEPLOYMENT, LABEL_ROLE

from .config import FrontendConfig
from .contract import Engine, EngineRole, engine_from_spec
from .flows import FlowName
from .selection import Policy, RevisionPolicy
from .server import Frontend

log = logging.getLogger("disagg.frontend")
GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the young generation (CPython's default is 700, a few per request)."""


def build_config(
    *,
    flow: FlowName,
    render: bool,
    prefill_policy: Policy,
    decode_policy: Policy | None,
    revision_policy: RevisionPolicy,
    conversation_ttl: float,
    decoder_blocks_ttl: float,
    max_conversations: int,
    request_timeout: float,
    prefill_timeout: float,
    connect_timeout: float,
    model: str | None,
    drain_seconds: float,
    selectors: dict[EngineRole, dict[str, str]],
) -> FrontendConfig:
    if conversation_ttl >= decoder_blocks_ttl:
        raise ValueError(
            f"--conversation-ttl ({conversation_ttl:g}) must be below --decoder-blocks-ttl ({decoder_blocks_ttl:g}): "
            "decode frees a conversation's blocks after its decoder_kv_blocks_ttl"
        )
    return FrontendConfig(
        flow=flow,
        render=render,
        prefill_policy=prefill_policy,
        decode_policy=decode_policy or ("consistent_hash" if flow == "bidirectional" else "round_robin"),
        revision_policy=revision_policy,
        conversation_ttl=conversation_ttl,
        decoder_blocks_ttl=decoder_blocks_ttl,
        max_conversations=max_conversations,
        request_timeout=request_timeout,
        prefill_timeout=prefill_timeout,
        connect_timeout=connect_timeout,
        model=model,
        drain_seconds=drain_seconds,
        selectors=selectors,
    )


def static_engines(prefill: tuple[str, ...], decode: tuple[str, ...], render: tuple[str, ...]) -> list[Engine]:
    engines = [engine_from_spec("prefill", spec, i) for i, spec in enumerate(prefill)]
    engines += [engine_from_spec("decode", spec, i) for i, spec in enumerate(decode)]
    engines += [engine_from_spec("render", spec, i) for i, spec in enumerate(render)]
    return engines


def resolve_selectors(
    deployment: str | None, given: dict[EngineRole, dict[str, str]], render: bool
) -> dict[EngineRole, dict[str, str]]:
    roles: tuple[EngineRole, ...] = ("prefill", "decode", "render") if render else ("prefill", "decode")
    out: dict[EngineRole, dict[str, str]] = {}
    for role in roles:
        labels = dict(given.get(role) or {})
        if not labels:
            if deployment is None:
                raise ValueError(f"kubernetes discovery needs --deployment or --{role}-selector")
            labels = {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role}
        out[role] = labels
    return out


async def serve(
    frontend: Frontend,
    host: str,
    port: int,
    admin_port: int,
    source: Any,
    stop: asyncio.Event,
) -> None:
    await frontend.start()
    runners: list[web.AppRunner] = []
    try:
        if source is not None:
            await source.start()
        main = frontend.runner(admin=admin_port == 0)
        await main.setup()
        await web.TCPSite(main, host, port, backlog=4096, reuse_address=True).start()
        runners.append(main)
        if admin_port:
            admin = web.AppRunner(frontend.admin_app(), access_log=None, handle_signals=False)
            await admin.setup()
            await web.TCPSite(admin, host, admin_port, reuse_address=True).start()
            runners.append(admin)
        log.info(
            "frontend (%s%s) on %s:%d, admin on %s",
            frontend.config.flow,
            ", render tier" if frontend.config.render else "",
            host,
            port,
            admin_port or port,
        )
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()
        if source is not None:
            await source.close()
        await frontend.close()


def run(
    *,
    host: str,
    port: int,
    admin_port: int,
    discovery: str,
    namespace: str,
    deployment: str | None,
    engine_port: int,
    prefill_urls: tuple[str, ...],
    decode_urls: tuple[str, ...],
    render_urls: tuple[str, ...],
    moriio_registration: str,
    verbose: bool,
    selectors: dict[EngineRole, dict[str, str]],
    **settings: Any,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = build_config(selectors=selectors, **settings)
    frontend = Frontend(config)
    source: Any = None
    if discovery == "static":
        if not prefill_urls or not decode_urls:
            raise ValueError("static discovery needs at least one --prefill and one --decode URL")
        if config.render and not render_urls:
            raise ValueError("--render with static discovery needs a --render-url")
        frontend.set_engines(static_engines(prefill_urls, decode_urls, render_urls))
    elif discovery == "moriio-registration":
        if config.flow not in ("moriio-read", "moriio-write"):
            raise ValueError("--discovery moriio-registration serves --flow moriio-read or moriio-write")
        from .registry import MoriioRegistry

        def registered(engines: list[Engine]) -> None:
            statics = static_engines((), (), render_urls)
            frontend.set_engines([*engines, *statics])

        source = MoriioRegistry(moriio_registration, registered, "READ" if config.flow == "moriio-read" else "WRITE")
        frontend.set_engines(static_engines((), (), render_urls))
    else:
        from .discovery import PodDiscovery

        source = PodDiscovery(
            namespace, resolve_selectors(deployment, selectors, config.render), engine_port, frontend.set_engines
        )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await serve(frontend, host, port, admin_port, source, stop)

    # What exists now (modules, the app, the engines) lives as long as the process: frozen, the collector's older
    # generations no longer walk it, and the young one is collected every 10,000 allocations instead of 700. The
    # collector took 7% of the CPU on the pull flow; with both, 0.22 ms of CPU per request instead of 0.26 (D247).
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    # uvloop's event loop and transports: 0.35-0.46 ms of CPU per request against 0.42-0.49 ms on asyncio's loop in an
    # interleaved A/B (docs/performance.md, D242).
    uvloop.run(main())
