"""MoRI-IO registration listener (shell): a ZMQ ROUTER socket receiving the engines' msgpack heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import msgpack
import zmq
import zmq.asyncio

from .contract import ContractError, Engine
from .moriio import REGISTRATION_TTL, engine_from_registration

log = logging.getLogger("disagg.frontend.registry")


class MoriioRegistry:
    def __init__(
        self,
        bind: str,
        on_change: Callable[[list[Engine]], None],
        expected_mode: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bind = bind
        self.on_change = on_change
        self.expected_mode = expected_mode
        self.clock = clock
        self._seen: dict[str, tuple[Engine, float]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)

    async def start(self) -> None:
        self._socket.bind(self.bind)
        self._tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._expire())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._socket.close(0)
        self._context.term()

    def engines(self) -> list[Engine]:
        return [engine for engine, _ in self._seen.values()]

    async def _receive(self) -> None:
        while True:
            frames = await self._socket.recv_multipart()
            try:
                engine, mode = engine_from_registration(msgpack.unpackb(frames[-1]))
            except (ContractError, ValueError, TypeError, msgpack.UnpackException) as e:
                log.warning("ignoring a MoRI-IO registration: %s", e)
                continue
            if self.expected_mode is not None and mode != self.expected_mode:
                log.error(
                    "%s registered transfer_mode %s, the frontend runs %s: ignored",
                    engine.name,
                    mode,
                    self.expected_mode,
                )
                continue
            known = engine.key in self._seen and self._seen[engine.key][0] == engine
            self._seen[engine.key] = (engine, self.clock())
            if not known:
                log.info("MoRI-IO %s registered: %s (%s)", engine.role, engine.name, engine.moriio_zmq_address)
                self.on_change(self.engines())

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(REGISTRATION_TTL / 3)
            cutoff = self.clock() - REGISTRATION_TTL
            stale = [key for key, (_, seen) in self._seen.items() if seen < cutoff]
            for key in stale:
                log.warning("MoRI-IO engine %s stopped registering: dropped", self._seen[key][0].name)
                del self._seen[key]
            if stale:
                self.on_change(self.engines())
