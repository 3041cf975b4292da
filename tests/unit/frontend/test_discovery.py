"""Pod discovery's event handling (the kr8s calls are replaced by an in-memory API; a real API server is the
operator-side e2e's job)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from disagg.frontend.contract import LABEL_PAIRING_REVISION, Engine
from disagg.frontend.discovery import PodDiscovery


class Obj:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw


def pod(name: str, role: str, ip: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": name, "labels": {"disagg.dev/role": role, LABEL_PAIRING_REVISION: "r"}},
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


class FakeApi:
    def __init__(self, pods: dict[str, list[dict[str, Any]]]) -> None:
        self.pods = pods
        self.events: dict[str, asyncio.Queue[tuple[str, dict[str, Any]]]] = {}

    async def get(self, kind: str, namespace: str, label_selector: str) -> AsyncIterator[Obj]:
        for raw in self.pods[label_selector]:
            yield Obj(raw)

    async def watch(self, kind: str, namespace: str, label_selector: str) -> AsyncIterator[tuple[str, Obj]]:
        queue = self.events.setdefault(label_selector, asyncio.Queue())
        while True:
            kind_, raw = await queue.get()
            yield kind_, Obj(raw)


async def test_discovery_lists_then_follows_the_watch() -> None:
    selectors = {"prefill": {"app": "p"}, "decode": {"app": "d"}}
    api = FakeApi({"app=p": [pod("p0", "prefill", "10.0.0.1")], "app=d": [pod("d0", "decode", "10.0.0.2", False)]})
    seen: list[list[Engine]] = []
    discovery = PodDiscovery("ns", selectors, 8000, seen.append, resync_seconds=3600)  # type: ignore[arg-type]
    discovery._api = api
    for role in selectors:
        await discovery._list(role)  # type: ignore[arg-type]
    discovery._publish()
    tasks = [asyncio.create_task(discovery._watch(role)) for role in selectors]  # type: ignore[arg-type]
    try:
        assert [e.name for e in seen[-1]] == ["p0"]  # d0 is not Ready yet
        await asyncio.sleep(0)
        await api.events["app=d"].put(("MODIFIED", pod("d0", "decode", "10.0.0.2", True)))
        await asyncio.sleep(0.05)
        assert sorted(e.name for e in seen[-1]) == ["d0", "p0"]
        assert {e.role for e in seen[-1]} == {"prefill", "decode"}
        await api.events["app=p"].put(("DELETED", pod("p0", "prefill", "10.0.0.1")))
        await asyncio.sleep(0.05)
        assert [e.name for e in seen[-1]] == ["d0"]
    finally:
        for task in tasks:
            task.cancel()
