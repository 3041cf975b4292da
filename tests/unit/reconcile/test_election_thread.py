"""The elector on its own thread keeps renewing while the operator's event loop is blocked by CPU-bound work
(D152), where the same elector on the loop misses its renew deadline; and the loop's side of the hand-over
(acquire, lost, release) works across the thread boundary. Real clocks, short leases."""

from __future__ import annotations

import asyncio
import threading
import time

from disagg.reconcile.cache import Cache
from disagg.reconcile.election import ElectionThread
from disagg.reconcile.kube import Kube, Response
from disagg.reconcile.leader import LeaderElector, LeaseConfig
from disagg.reconcile.operator import RunOptions, lead
from disagg.reconcile.reconciler import Reconciler
from tests.support.fake_kube import FakeApiServer

NAMESPACE = "ops"
CONFIG = LeaseConfig(NAMESPACE, "disagg-operator", "a", lease_seconds=2, renew_deadline_seconds=1.2, retry_seconds=0.2)
BLOCKED_S = 2.5
"""Longer than the renew deadline and the lease."""


def busy(seconds: float) -> int:
    """CPU-bound work holding the loop (and competing for the interpreter lock), as a burst of passes does."""
    deadline, total = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        total += sum(i * i for i in range(2000))
    return total


def lease_updates(server: FakeApiServer) -> int:
    return sum(1 for r in list(server.requests) if r.method == "PUT" and "/leases/" in r.path)


def renew_time(server: FakeApiServer) -> str:
    lease = server.get("Lease", NAMESPACE, "disagg-operator")
    assert lease is not None
    return str(lease["spec"]["renewTime"])


async def test_renewals_continue_while_the_loop_is_blocked() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    election = ElectionThread(lambda: Kube(server), CONFIG)
    election.start()
    stop = asyncio.Event()
    try:
        assert await election.acquire(stop)
        # Named, so a thread dump (py-spy, faulthandler) tells the elector from the client's pool threads.
        assert "leader-election" in {thread.name for thread in threading.enumerate()}
        before, renewed = lease_updates(server), renew_time(server)
        busy(BLOCKED_S)
        assert election.may_write(), "the lease was not renewed while the loop was blocked"
        assert election.leading
        # One renewal per retry period, give or take the scheduler: far more than none.
        assert lease_updates(server) - before >= BLOCKED_S / CONFIG.retry_seconds / 3
        assert renew_time(server) != renewed
    finally:
        await election.release()
    assert not election.may_write()
    assert server.get("Lease", NAMESPACE, "disagg-operator")["spec"]["holderIdentity"] == ""  # type: ignore[index]


async def test_on_the_loop_the_same_block_costs_the_lease() -> None:
    """What the thread is for: the elector as it ran before, on the blocked loop, cannot renew in time."""
    server = FakeApiServer(namespaces=(NAMESPACE,))
    elector = LeaderElector(Kube(server), CONFIG)
    stop = asyncio.Event()
    assert await elector.acquire(stop)
    holder = asyncio.create_task(elector.hold(stop))
    await asyncio.sleep(0.3)
    busy(BLOCKED_S)
    assert not elector.may_write()
    stop.set()
    await holder


async def test_the_loop_sees_a_lost_lease_and_campaigns_again_only_when_it_asks() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    election = ElectionThread(lambda: Kube(server), CONFIG)
    election.start()
    stop = asyncio.Event()
    try:
        assert await election.acquire(stop)
        # Someone else takes the Lease (as after a partition): the holder's next renewal fails with a conflict-free
        # read showing another holder, and it stands down.
        server.update(
            "Lease", NAMESPACE, "disagg-operator", lambda lease: lease["spec"].update(holderIdentity="b"), "other"
        )
        async with asyncio.timeout(5):
            await election.lost(stop)
        assert not election.leading and not election.may_write()
        requests = len(server.requests)
        await asyncio.sleep(4 * CONFIG.retry_seconds)
        assert len(server.requests) == requests, "the thread campaigned before the loop asked"
        server.update("Lease", NAMESPACE, "disagg-operator", lambda lease: lease["spec"].update(holderIdentity=""), "x")
        async with asyncio.timeout(5):
            assert await election.acquire(stop)
        assert election.took_over  # the record named someone else (nobody) when it took it
    finally:
        await election.release()


class Broken(FakeApiServer):
    async def request(self, *args: object, **kwargs: object) -> Response:
        raise RuntimeError("a bug in the elector's client")


async def test_an_election_thread_that_dies_stops_the_operator_instead_of_idling() -> None:
    election = ElectionThread(lambda: Kube(Broken(namespaces=(NAMESPACE,))), CONFIG)
    election.start()
    stop = asyncio.Event()
    reconciler = Reconciler(Kube(FakeApiServer()), Cache())
    async with asyncio.timeout(5):
        await lead(reconciler, election, [], RunOptions(), stop)
    assert stop.is_set()  # kopf stops with it, the process exits and the pod is restarted
    await election.release()
