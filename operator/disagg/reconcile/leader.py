"""Leader election on a coordination.k8s.io Lease, with the semantics of client-go's LeaderElector (D122).

One replica holds the Lease and reconciles; the others keep their caches warm and try to take the Lease every
`retry_seconds`. A Lease may be taken when its holder has not renewed it for `lease_seconds` as measured on the
taker's own clock from when it last saw the record change, so clock differences between nodes do not matter. The
holder renews every `retry_seconds` and gives up (stops writing, stops its workers) when it has not renewed for
`renew_deadline_seconds`, which is shorter than `lease_seconds`: it stops before anyone else can start.

The write gate (`may_write`) holds the same promise for writes already on their way: it admits a write only while
the last successful renewal is younger than the renew deadline, on this process's monotonic clock. A process that
was paused (SIGSTOP, a frozen VM) wakes up with that clock moved on, so its first write is refused before it is
sent, whatever the paused code was doing. What no client-side check can stop is a write that passed the gate and
then took longer than lease duration minus renew deadline to reach the API server; client-go's elector has the same
limit (D123). On shutdown the holder releases the Lease, so a rolling update hands over within one retry period.

The elector talks to the API server through a `Kube` of its own: a backlog of applies behind the client-side rate
limits must never delay a renewal. The operator runs it on a thread and event loop of its own (`election.py`,
D152), so the passes' CPU work does not delay renewals either.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from disagg.names import LEASE

from . import metrics
from .events import Notice, event_object
from .kube import Kube, KubeError

log = logging.getLogger("disagg.leader")

JITTER = 0.2
_RECORD_FIELDS = ("holderIdentity", "renewTime", "acquireTime", "leaseTransitions", "leaseDurationSeconds")
"""The Lease spec's fields that make the leader election record: a holder renewing changes renewTime."""


def micro_time() -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    """Who holds the Lease: the pod's name in a cluster (unique among the replicas, and readable in the Lease)."""
    lease_seconds: float = 8.0
    renew_deadline_seconds: float = 6.0
    retry_seconds: float = 1.5

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_seconds}s, {self.renew_deadline_seconds}s, {self.lease_seconds}s"
            )


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        config: LeaseConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = micro_time,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self.wall = wall
        self.leading = False
        self._renewed_at = float("-inf")
        """Monotonic time just before the request of the last successful acquire or renewal was sent."""
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[str, ...] | None = None
        """The record's `_RECORD_FIELDS` as last seen, and when it was seen:"""
        self._observed_at = float("-inf")
        self.previous_holder: str | None = None
        """Who held the Lease before this replica took it (for the handover event)."""
        self.took_over = True
        """Whether the last acquisition took the Lease from a record naming someone else (or nobody). False when the
        record still named this replica: it lost the Lease by not renewing in time and nobody took it meanwhile, so
        nobody else has written as leader since it last did."""

    # -- the write gate ---------------------------------------------------------------------------------------

    def may_write(self) -> bool:
        return self.leading and self.clock() - self._renewed_at < self.config.renew_deadline_seconds

    # -- campaigning and holding ------------------------------------------------------------------------------

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Try to take the Lease every retry period until this replica holds it (True) or `stop` is set (False)."""
        while not stop.is_set():
            if await self._try():
                self._became_leader()
                await self._announce()
                return True
            await self._sleep(stop, self.config.retry_seconds * random.uniform(1.0, 1.0 + JITTER))
        return False

    async def hold(self, stop: asyncio.Event) -> None:
        """Renew every retry period; returns when `stop` is set or the Lease is lost (then `leading` is False)."""
        while self.leading and not stop.is_set():
            await self._sleep(stop, self.config.retry_seconds)
            if stop.is_set():
                return
            deadline = self._renewed_at + self.config.renew_deadline_seconds
            renewed = False
            while not renewed and self.clock() < deadline and not stop.is_set():
                try:
                    async with asyncio.timeout(max(deadline - self.clock(), 0.01)):
                        renewed = await self._try()
                except TimeoutError:
                    break
                if not renewed and self._held_by_other():
                    break
                if not renewed:
                    await self._sleep(stop, min(self.config.retry_seconds / 2, max(deadline - self.clock(), 0)))
            if not renewed and not stop.is_set():
                self._lost()

    async def release(self) -> None:
        """Give the Lease up (graceful shutdown): the next candidate takes it at its next try."""
        if not self.leading or self._lease is None:
            return
        self.leading = False
        metrics.LEADER.set(0)
        lease = self._lease
        spec = dict(lease.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": self.wall()})
        try:
            await self.kube.replace({**lease, "spec": spec})
            log.info("released lease %s/%s", self.config.namespace, self.config.name)
        except KubeError as exc:
            log.warning("could not release lease %s/%s: %s", self.config.namespace, self.config.name, exc)

    # -- one attempt ------------------------------------------------------------------------------------------

    async def _try(self) -> bool:
        """One acquire-or-renew, as client-go's tryAcquireOrRenew. True when this replica holds the Lease now."""
        config = self.config
        started = self.clock()
        lease = self._lease if self.leading else None  # the holder renews from its own copy: one request
        if lease is None:
            try:
                lease = await self.kube.get(LEASE.name, config.namespace, config.name)
            except KubeError as exc:
                log.warning("reading lease %s/%s: %s", config.namespace, config.name, exc)
                return False
            if lease is None:
                return await self._create(started)
            self._observe(lease)
            if self._held_by_other() and self.clock() < self._observed_at + config.lease_seconds:
                return False
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        now = self.wall()
        if not self.leading:
            self.took_over = holder != config.identity
        if holder != config.identity:
            self.previous_holder = holder or None
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            {"holderIdentity": config.identity, "leaseDurationSeconds": int(config.lease_seconds), "renewTime": now}
        )
        try:
            updated = await self.kube.replace({**lease, "spec": spec})
        except KubeError as exc:
            if exc.status == 409:  # someone else wrote it since we read it: read again next time
                self._lease = None
                if self.leading:
                    fresh = await self._read()
                    if fresh is not None:
                        self._observe(fresh)
            else:
                log.warning("updating lease %s/%s: %s", config.namespace, config.name, exc)
            return False
        self._stored(updated, started)
        return True

    async def _create(self, started: float) -> bool:
        config = self.config
        now = self.wall()
        lease = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.name,
            "metadata": {"name": config.name, "namespace": config.namespace},
            "spec": {
                "holderIdentity": config.identity,
                "leaseDurationSeconds": int(config.lease_seconds),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.kube.create(lease)
        except KubeError as exc:
            if exc.status != 409:
                log.warning("creating lease %s/%s: %s", config.namespace, config.name, exc)
            return False
        self.previous_holder = None
        self.took_over = True
        self._stored(created, started)
        return True

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await self.kube.get(LEASE.name, self.config.namespace, self.config.name)
        except KubeError:
            return None

    def _stored(self, lease: dict[str, Any], started: float) -> None:
        self._lease = lease
        self._renewed_at = started
        self._observe(lease)

    def _observe(self, lease: dict[str, Any]) -> None:
        # The leader election record, as client-go compares it: an edit of the Lease's metadata (a label, an
        # annotation) by anyone is not the holder renewing, so it does not keep a stuck holder's lease alive.
        spec = lease.get("spec") or {}
        record = tuple(str(spec.get(field) or "") for field in _RECORD_FIELDS)
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    def _held_by_other(self) -> bool:
        return self._observed is not None and self._observed[0] not in ("", self.config.identity)

    # -- transitions ------------------------------------------------------------------------------------------

    def _became_leader(self) -> None:
        self.leading = True
        metrics.LEADER.set(1)
        metrics.LEADER_TRANSITIONS.labels("started").inc()
        taken = f", taking over from {self.previous_holder}" if self.previous_holder else ""
        log.info(
            "%s became the leader (lease %s/%s%s)", self.config.identity, self.config.namespace, self.config.name, taken
        )

    def _lost(self) -> None:
        self.leading = False
        self._lease = None
        metrics.LEADER.set(0)
        metrics.LEADER_TRANSITIONS.labels("stopped").inc()
        holder = self._observed[0] if self._observed else ""
        log.warning(
            "%s lost the lease %s/%s (%s); it stops reconciling",
            self.config.identity,
            self.config.namespace,
            self.config.name,
            f"now held by {holder}" if holder and holder != self.config.identity else "not renewed in time",
        )

    async def _announce(self) -> None:
        """An Event on the Lease naming the new leader and whom it took over from, for `kubectl describe`."""
        if self._lease is None:
            return
        message = f"{self.config.identity} became leader"
        if self.previous_holder:
            message += f", taking over from {self.previous_holder}"
        notice = Notice("Normal", "LeaderElection", message)
        try:
            await self.kube.create_event(
                self.config.namespace, event_object(self._lease, notice, self.wall()[:19] + "Z", self.config.identity)
            )
        except KubeError as exc:
            log.warning("could not record the leader election event: %s", exc)

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        if seconds <= 0:
            return
        try:
            async with asyncio.timeout(seconds):
                await stop.wait()
        except TimeoutError:
            pass
