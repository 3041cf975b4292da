"""A work queue in the style of client-go's: each key is reconciled by one worker at a time, repeated requests
for a key collapse into one, failed keys come back after an exponential backoff, and every key is revisited
periodically so drift is found even without an event.

Backoff counts consecutive failed passes of a key. Only a pass that succeeds (or `forget`, when the key is gone)
resets the count; a pass that fails for the same reason again must wait longer than the one before, up to
`max_delay`, or a permanent error would be retried at the base rate forever.
"""

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
        """Add the key after `delay` seconds. Of two requests for the same key the earlier one wins: a retry due in
        a second is not held back by a resync due in a minute, nor the reverse."""
        if key in self._queued:
            return
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= loop.time() + delay:
                return
            timer.cancel()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def due_in(self, key: Key) -> float | None:
        """Seconds until the key's timer adds it, or None when no timer is set."""
        timer = self._timers.get(key)
        if timer is None:
            return None
        return max(0.0, timer.when() - asyncio.get_running_loop().time())

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def backoff(self, key: Key) -> float:
        """The delay for the key's next retry, given its failures so far."""
        # A key failing every max_delay for days must not overflow the float: any cap is reached well before 2**60.
        exponent = min(self._failures.get(key, 0), 60)
        delay: float = min(self.base_delay * 2.0**exponent, self.max_delay)
        return delay

    def retry(self, key: Key) -> float:
        """Count one more failed pass and schedule the key again after its backoff; returns the delay chosen."""
        delay = self.backoff(key)
        self._failures[key] = self._failures.get(key, 0) + 1
        self.add_after(key, delay)
        return delay

    def failures(self, key: Key) -> int:
        """Consecutive failed passes of the key so far."""
        return self._failures.get(key, 0)

    def succeeded(self, key: Key) -> None:
        """A pass succeeded: the next failure starts from the base delay again."""
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
