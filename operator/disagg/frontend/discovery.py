"""Engine discovery (shell): pods watched through the Kubernetes API with kr8s, or a static list.

One watch per role with that role's label selector (the same selectors the operator renders for vllm-router).
A watch that ends or fails is restarted after a back-off, and a full list every `resync_seconds` replaces the view,
so a missed DELETED event cannot keep a dead pod in rotation for longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .contract import ContractError, Engine, EngineRole, engine_from_pod

log = logging.getLogger("disagg.frontend.discovery")


def selector_string(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


class PodDiscovery:
    def __init__(
        self,
        namespace: str,
        selectors: Mapping[EngineRole, Mapping[str, str]],
        engine_port: int,
        on_change: Callable[[list[Engine]], None],
        resync_seconds: float = 60.0,
    ) -> None:
        self.namespace = namespace
        self.selectors = dict(selectors)
        self.engine_port = engine_port
        self.on_change = on_change
        self.resync_seconds = resync_seconds
        self._pods: dict[EngineRole, dict[str, dict[str, Any]]] = {role: {} for role in self.selectors}
        self._tasks: list[asyncio.Task[None]] = []
        self._published: list[Engine] | None = None

    async def start(self) -> None:
        import kr8s.asyncio

        self._api = await kr8s.asyncio.api()
        for role in self.selectors:
            await self._list(role)
        self._publish()
        for role in self.selectors:
            self._tasks.append(asyncio.create_task(self._watch(role), name=f"watch-{role}"))
        self._tasks.append(asyncio.create_task(self._resync(), name="resync"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _list(self, role: EngineRole) -> None:
        pods: dict[str, dict[str, Any]] = {}
        async for pod in self._api.get(
            "pods", namespace=self.namespace, label_selector=selector_string(self.selectors[role])
        ):
            raw = pod.raw if hasattr(pod, "raw") else dict(pod)
            pods[raw["metadata"]["name"]] = raw
        self._pods[role] = pods

    async def _watch(self, role: EngineRole) -> None:
        backoff = 1.0
        while True:
            try:
                async for kind, pod in self._api.watch(
                    "pods", namespace=self.namespace, label_selector=selector_string(self.selectors[role])
                ):
                    raw = pod.raw
                    name = raw["metadata"]["name"]
                    if kind == "DELETED":
                        self._pods[role].pop(name, None)
                    else:
                        self._pods[role][name] = raw
                    self._publish()
                    backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the API server restarting or a dropped connection: watch again
                log.warning("watch of %s pods failed (%s); retrying in %.0f s", role, e, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            for role in self.selectors:
                try:
                    await self._list(role)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("listing %s pods failed (%s); keeping the last view", role, e)
            self._publish()

    def engines(self) -> list[Engine]:
        out: list[Engine] = []
        for role, pods in self._pods.items():
            for name, pod in sorted(pods.items()):
                try:
                    engine = engine_from_pod(pod, self.engine_port, role)
                except ContractError as e:
                    log.error("pod %s is not used as a %s engine: %s", name, role, e)
                    continue
                if engine is not None:
                    out.append(engine)
        return out

    def _publish(self) -> None:
        engines = self.engines()
        if engines != self._published:
            self._published = engines
            log.info(
                "engines: %s",
                ", ".join(f"{e.role}:{e.name}@{e.revision or '-'}" for e in engines) or "none",
            )
            self.on_change(engines)
