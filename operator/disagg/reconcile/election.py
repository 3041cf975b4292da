"""The leader elector on a thread of its own, with an event loop and an API client of its own (D152).

Renewals must not wait for the operator's event loop: a loop busy with passes (rendering, JSON, status
computation) on a starved machine delayed them past the renew deadline, and a healthy leader stood down again and
again (docs/performance.md). On its own thread the elector needs only the interpreter lock, which a busy thread
hands over every switch interval (5 ms), so it renews on time however long the loop is busy.

The operator's loop drives it: `acquire` asks the thread to campaign and waits until it leads, `lost` waits until
it no longer does, `release` gives the Lease up and ends the thread. After a loss the thread does not campaign
again until the loop asks, so the loop always stands its workers down before a new term starts. The write gate
(`may_write`) reads the elector's state directly: it is a comparison of two numbers, safe from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from .kube import Kube
from .leader import LeaderElector, LeaseConfig

log = logging.getLogger("disagg.leader")


class ElectionThread:
    def __init__(self, make_kube: Callable[[], Kube], config: LeaseConfig) -> None:
        """`make_kube` is called on the thread: the client's connections belong to the thread's loop."""
        self.config = config
        self._make_kube = make_kube
        self.elector: LeaderElector | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        """The thread's loop, where its events live."""
        self._campaign: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        """Set (on the operator's loop) whenever the elector starts or stops leading."""
        self._failure: BaseException | None = None

    # -- called from the operator's loop --------------------------------------------------------------------------

    def start(self) -> None:
        self._owner_loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def may_write(self) -> bool:
        return self.elector is not None and self.elector.may_write()

    @property
    def leading(self) -> bool:
        return self.elector is not None and self.elector.leading

    @property
    def took_over(self) -> bool:
        return self.elector is None or self.elector.took_over

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Campaign until this replica leads (True) or `stop` is set (False)."""
        self._call(lambda: self._campaign.set() if self._campaign else None)
        while not self.leading:
            if stop.is_set() or not self._alive():
                return False
            await self._wait_change(stop)
        return True

    async def lost(self, stop: asyncio.Event) -> None:
        """Wait until this replica no longer leads, or `stop` is set. (It cannot lead again meanwhile: the thread
        campaigns only when `acquire` asks.)"""
        while self.leading and not stop.is_set() and self._alive():
            await self._wait_change(stop)

    async def release(self) -> None:
        """Give the Lease up if it is held, and end the thread."""
        if self._thread is None:
            return
        self._call(lambda: self._stop.set() if self._stop else None)
        await asyncio.to_thread(self._thread.join)
        self._thread = None

    # -- internals -----------------------------------------------------------------------------------------------

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def _wait_change(self, stop: asyncio.Event) -> None:
        assert self._changed is not None
        changed, stopped = asyncio.create_task(self._changed.wait()), asyncio.create_task(stop.wait())
        try:
            # The timeout only guards against a thread that died without a word.
            await asyncio.wait({changed, stopped}, timeout=1, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (changed, stopped):
                task.cancel()
        self._changed.clear()

    def _call(self, action: Callable[[], None]) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(action)

    def _notify(self) -> None:
        if self._owner_loop is not None and self._changed is not None:
            with contextlib.suppress(RuntimeError):  # the operator's loop has closed: nobody is waiting
                self._owner_loop.call_soon_threadsafe(self._changed.set)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # the loop thread must hear of it rather than wait forever
            self._failure = exc
            log.exception("the leader election thread failed; this replica no longer campaigns")
        finally:
            self._ready.set()
            self._notify()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._campaign, self._stop = asyncio.Event(), asyncio.Event()
        kube = self._make_kube()
        elector = LeaderElector(kube, self.config)
        self.elector = elector
        self._ready.set()
        try:
            while not self._stop.is_set():
                await _either(self._campaign, self._stop)
                if self._stop.is_set():
                    break
                self._campaign.clear()
                if not await elector.acquire(self._stop):
                    break
                self._notify()
                await elector.hold(self._stop)
                self._notify()
            await elector.release()
        finally:
            self._notify()
            await kube.close()


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.create_task(first.wait()), asyncio.create_task(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
