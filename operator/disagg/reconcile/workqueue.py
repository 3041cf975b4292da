"""A work queue in the style of client-go's: each key is reconciled by one worker at a time, repeated requests
for a key collapse into one, failed keys come back after an exponential backoff, and every key is revisited
periodically so drift is found even without an event."""

from __future__ import annotations

import asyncio

Key = tuple[str, str]
"""(namespace, name) of a DisaggDeployment."""


class WorkQueue:
    def __init__(self, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._failures: dict[Key, int] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def add(self, key: Key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            self._again.add(key)  # reconcile once more after the current pass, with fresh state
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Key, delay: float) -> None:
        if key in self._timers or key in self._queued:
            return
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: Key) -> float:
        """Schedule the key again after its backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self.base_delay * 2.0**failures, self.max_delay)
        self.add_after(key, delay)
        return delay

    def failures(self, key: Key) -> int:
        """Consecutive failed passes of the key so far."""
        return self._failures.get(key, 0)

    def succeeded(self, key: Key) -> None:
        self._failures.pop(key, None)

    def forget(self, key: Key) -> None:
        self._failures.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    async def get(self) -> Key:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._queued)
