"""A work queue in the style of client-go's: each key is reconciled by one worker at a time, repeated requests
for a key collapse into one, failed keys come back after an exponential backoff, and every key is revisited
periodically so drift is found even without an event.

Backoff counts consecutive failed passes of a key. Only a pass that succeeds (or `forget`, when the key is gone)
resets the count; a pass that fails for the same reason again must wait longer than the one before, up to
`max_delay`, or a permanent error would be retried at the base rate forever.

Keys wait in one of two lanes (D153): what an event, a retry or a timer asks for goes first; what is only a
periodic revisit (the resync, every key at a leadership change or an RBAC recovery) waits until nothing else
does. A key asked for both ways is moved to the first lane. With 1000 DisaggDeployments a resync queues 1000
passes at once, and a change arriving behind them waited for all of them.
"""

from __future__ import annotations

import asyncio
from collections import deque

Key = tuple[str, str]
"""(namespace, name) of a DisaggDeployment."""


class WorkQueue:
    def __init__(self, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        self._lanes: tuple[deque[Key], deque[Key]] = (deque(), deque())
        """Keys waiting: those asked for by a change, then those only revisited."""
        self._queued: dict[Key, int] = {}
        """Waiting keys and the lane each is in."""
        self._wakeup = asyncio.Event()
        self._active: set[Key] = set()
        self._again: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._failures: dict[Key, int] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def add(self, key: Key, revisit: bool = False) -> None:
        """Queue the key; `revisit` when nothing changed and this is only the periodic look (the second lane)."""
        lane = 1 if revisit else 0
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            # Reconcile once more after the current pass, with fresh state.
            self._again[key] = min(lane, self._again.get(key, lane))
            return
        current = self._queued.get(key)
        if current is not None and current <= lane:
            return
        if current is not None:
            self._lanes[current].remove(key)  # promoted: a change arrived for a key waiting for its revisit
        self._queued[key] = lane
        self._lanes[lane].append(key)
        self._wakeup.set()

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
        while True:
            for lane in self._lanes:
                if lane:
                    key = lane.popleft()
                    del self._queued[key]
                    self._active.add(key)
                    return key
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, key: Key) -> None:
        self._active.discard(key)
        lane = self._again.pop(key, None)
        if lane is not None:
            self.add(key, revisit=lane == 1)

    def __len__(self) -> int:
        return len(self._queued)
