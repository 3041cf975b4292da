"""A work queue in the style of client-go's: each key is reconciled by one worker at a time, repeated requests
for a key collapse into one, failed keys come back after an exponential backoff, and every key is revisited
periodically so drift is found even without an event.

Backoff counts consecutive failed passes of a key. Only a pass that succeeds (or `forget`, when the key is gone)
resets the count; a pass that fails for the same reason again must wait longer than the one before, up to
`max_delay`, or a permanent error would be retried at the base rate forever.

Keys wait in one of three lanes, and a worker takes from the first lane that is not empty:
- "change" (D210): keys `urgent` says are waiting for a pass of a spec nobody reconciled yet (a DisaggDeployment
  whose generation its status has not observed: one just created or changed). However the key was asked for, and
  whenever: a key in a later lane moves up when it becomes urgent.
- "event" (D153): what a child's event, a retry or a timer asks for.
- "revisit" (D153): what is only a periodic look (the resync, every key at a leadership change or an RBAC
  recovery).
With 1000 DisaggDeployments a resync queues 1000 passes at once, and the workload controllers' reports on their
children queue about as many; a user's change arriving behind them waited for all of them (64 s at 1000, D210).
Urgency is the key's state, not the request's: it is asked again whenever the key is added, so a key redone after
its pass (asked for during it) is urgent only if its pass did not observe the generation.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Key = tuple[str, str]
"""(namespace, name) of a DisaggDeployment."""

CHANGE, EVENT, REVISIT = 0, 1, 2
LANES = ("change", "event", "revisit")
"""The lanes' names, by index (the metrics' label)."""


def _never(_: Key) -> bool:
    return False


@dataclass(frozen=True)
class Taken:
    """A key a worker took, the lane it came from and how long it had waited since it was first asked for."""

    key: Key
    lane: int
    waited: float


class WorkQueue:
    def __init__(
        self,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        urgent: Callable[[Key], bool] = _never,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`urgent`: whether a key goes to the change lane (asked each time the key is added)."""
        self._lanes: tuple[deque[Key], ...] = tuple(deque() for _ in LANES)
        """Keys waiting, by lane."""
        self._queued: dict[Key, int] = {}
        """Waiting keys and the lane each is in."""
        self._since: dict[Key, float] = {}
        """When each waiting key was first asked for."""
        self.urgent = urgent
        self._clock = clock
        self._wakeup = asyncio.Event()
        self._active: set[Key] = set()
        self._again: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._failures: dict[Key, int] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def add(self, key: Key, revisit: bool = False) -> None:
        """Queue the key; `revisit` when nothing changed and this is only the periodic look (the last lane, unless
        the key is urgent)."""
        asked = REVISIT if revisit else EVENT
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            # Reconcile once more after the current pass, with fresh state; its urgency is asked again then.
            self._again[key] = min(asked, self._again.get(key, asked))
            return
        current = self._queued.get(key)
        if current == CHANGE:
            return  # first already; `urgent` reads the cache, so it is asked only when the answer can matter
        lane = CHANGE if self.urgent(key) else asked
        if current is not None and current <= lane:
            return
        if current is not None:
            self._lanes[current].remove(key)  # promoted: it became urgent, or a change arrived for a revisit
        else:
            self._since[key] = self._clock()
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
        return (await self.take()).key

    async def take(self) -> Taken:
        """The next key, from the first lane that has one; the key is active until `done`."""
        while True:
            for index, lane in enumerate(self._lanes):
                if lane:
                    key = lane.popleft()
                    del self._queued[key]
                    self._active.add(key)
                    return Taken(key, index, self._clock() - self._since.pop(key))
            self._wakeup.clear()
            await self._wakeup.wait()

    def restamp(self) -> None:
        """Count the waits of the keys waiting now from now: a standby's queue fills with what its watches report
        while no worker takes anything, and that time is not a wait for a worker."""
        now = self._clock()
        for key in self._since:
            self._since[key] = now

    def lane_of(self, key: Key) -> int | None:
        """The lane a waiting key is in, or None when it is not waiting."""
        return self._queued.get(key)

    def done(self, key: Key) -> None:
        self._active.discard(key)
        asked = self._again.pop(key, None)
        if asked is not None:
            self.add(key, revisit=asked == REVISIT)

    def __len__(self) -> int:
        return len(self._queued)
