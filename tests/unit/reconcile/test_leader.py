"""The Lease elector against the fake API server, on clocks the test moves: who may lead, when a standby may take
over, when a leader must stop writing, and the handover record (decision D122, D123)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import replace
from typing import Any

import pytest

from disagg.reconcile.kube import Kube, NotLeader, Response
from disagg.reconcile.leader import LeaderElector, LeaseConfig
from tests.support.fake_kube import FakeApiServer

NAMESPACE = "ops"


class Clocks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(identity: str) -> LeaseConfig:
    return LeaseConfig(
        NAMESPACE, "disagg-operator", identity, lease_seconds=8, renew_deadline_seconds=6, retry_seconds=1.5
    )


def electors(server: FakeApiServer, clock: Clocks) -> tuple[LeaderElector, LeaderElector]:
    return (
        LeaderElector(Kube(server), config("a"), clock=clock),
        LeaderElector(Kube(server), config("b"), clock=clock),
    )


def lease(server: FakeApiServer) -> dict[str, object]:
    found = server.get("Lease", NAMESPACE, "disagg-operator")
    assert found is not None
    spec = found["spec"]
    assert isinstance(spec, dict)
    return spec


async def test_one_replica_leads_and_a_standby_waits_a_whole_lease_without_renewals() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    assert await a.acquire(asyncio.Event()) and a.may_write()
    assert lease(server)["holderIdentity"] == "a"
    assert not await b._try()  # held and just renewed
    clock.now += 7
    assert not await b._try()  # b saw the record first at +0: a lease counts from when b saw it last change
    clock.now += 1.5
    assert await b._try() and lease(server)["holderIdentity"] == "b"
    assert lease(server)["leaseTransitions"] == 1


async def test_a_renewing_leader_is_never_taken_over() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    await a.acquire(asyncio.Event())
    for _ in range(20):
        clock.now += 1.5
        assert await a._try()  # a renewal changes the record
        assert not await b._try()
    assert lease(server)["holderIdentity"] == "a"


async def test_an_edit_of_the_leases_labels_is_not_a_renewal() -> None:
    """Someone labelling the Lease (a policy controller, kubectl label) changes its resourceVersion, not the leader
    election record: a holder that stopped renewing is still taken over a lease after its last renewal."""
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    assert not await b._try()
    for step in range(5):  # a stops renewing; every 1.5 s someone edits the Lease's labels
        clock.now += 1.5

        def label(obj: dict[str, Any], step: int = step) -> None:
            obj["metadata"].setdefault("labels", {})["audit"] = str(step)

        server.update("Lease", NAMESPACE, "disagg-operator", label, manager="kubectl-label")
        assert not await b._try()  # within 8 s of the last renewal
    clock.now += 1.5  # 9 s after the last renewal, past the 8 s lease
    assert await b._try() and lease(server)["holderIdentity"] == "b"


async def test_a_leader_that_cannot_renew_stops_writing_before_anyone_may_take_over() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    await a.acquire(asyncio.Event())
    assert not await b._try()
    clock.now += 5.9
    assert a.may_write()
    clock.now += 0.2  # past the renew deadline (6 s), still short of the lease (8 s) anyone else must wait
    assert not a.may_write()
    assert not await b._try()
    with pytest.raises(NotLeader):
        await Kube(server, a.may_write).create_event(NAMESPACE, {"metadata": {"generateName": "x-"}})


async def test_releasing_hands_the_lease_over_at_the_next_try_and_the_handover_is_an_event() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    await a.acquire(asyncio.Event())
    assert not await b._try()
    await a.release()
    assert not a.may_write() and lease(server)["holderIdentity"] == ""
    assert await b.acquire(asyncio.Event())
    messages = [e["message"] for e in server.objects("Event", NAMESPACE) if e["reason"] == "LeaderElection"]
    assert messages == ["a became leader", "b became leader"]  # a released it: nobody held it when b took it
    assert {e["type"] for e in server.objects("Event", NAMESPACE)} == {"Normal"}
    assert all(e["involvedObject"]["kind"] == "Lease" for e in server.objects("Event", NAMESPACE))


async def test_hold_returns_once_another_replica_holds_the_lease() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    await a.acquire(asyncio.Event())
    clock.now += 9  # a was paused: b takes the lease
    assert not await b._try()
    clock.now += 9
    assert await b._try()
    async with asyncio.timeout(5):
        await a.hold(asyncio.Event())
    assert not a.leading and not a.may_write()


def test_the_timings_must_leave_the_leader_time_to_stop_first() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(NAMESPACE, "x", "a", lease_seconds=6, renew_deadline_seconds=6, retry_seconds=1)


async def test_a_leader_that_regains_a_lease_nobody_took_knows_nobody_else_wrote() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    await a.acquire(asyncio.Event())
    assert a.took_over  # from nobody: whatever it remembers predates it
    clock.now += 7  # a misses its renew deadline (a starved event loop), but b has not waited a whole lease
    a._lost()
    assert not await b._try()
    assert await a.acquire(asyncio.Event()) and not a.took_over  # the record still named a
    a._lost()
    clock.now += 9
    assert not await b._try()
    clock.now += 9
    assert await b.acquire(asyncio.Event())
    await b.release()
    assert await a.acquire(asyncio.Event()) and a.took_over  # b led in between


async def test_lease_transitions_count_every_change_of_holder_and_acquire_time_marks_the_last() -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    assert lease(server)["leaseTransitions"] == 0
    first = lease(server)["acquireTime"]
    await a.release()
    assert await b.acquire(asyncio.Event())
    assert lease(server)["leaseTransitions"] == 1
    await b.release()
    clock.now += 1
    assert await a.acquire(asyncio.Event())
    assert lease(server)["leaseTransitions"] == 2 and lease(server)["holderIdentity"] == "a"
    taken = lease(server)["acquireTime"]
    clock.now += 1
    assert await a._try()  # a renewal is not a transition
    assert lease(server)["leaseTransitions"] == 2 and lease(server)["acquireTime"] == taken
    assert first is not None


async def test_a_holding_leader_renews_once_per_retry_period_not_in_a_loop() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    quick = LeaseConfig(NAMESPACE, "disagg-operator", "a", lease_seconds=4, renew_deadline_seconds=2, retry_seconds=0.1)
    a = LeaderElector(Kube(server), quick)  # the real clock: hold sleeps for real
    assert await a.acquire(asyncio.Event())
    before = len(server.requests)
    stop = asyncio.Event()
    task = asyncio.create_task(a.hold(stop))
    await asyncio.sleep(0.6)
    stop.set()
    await task
    renewals = [r for r in server.requests[before:] if r.method == "PUT" and "leases" in r.path]
    # About one every 0.1 s (fewer on a busy machine); a leader that renewed again right after renewing would
    # write hundreds.
    assert 1 <= len(renewals) <= 9


class Timed(FakeApiServer):
    """Also records when (event-loop time) each request arrived."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.times: list[tuple[str, float]] = []

    async def request(self, method: str, path: str, query: Any, body: Any, content_type: str) -> Response:
        self.times.append((method, asyncio.get_running_loop().time()))
        return await super().request(method, path, query, body, content_type)


async def test_a_standby_tries_no_more_often_than_the_retry_period() -> None:
    """Between tries a standby waits the retry period plus up to 20% jitter, never less (client-go's JitterUntil):
    N standbys must not read the Lease N times per period in lock-step."""
    server = Timed()
    retry = 0.1
    quick = LeaseConfig(
        NAMESPACE, "disagg-operator", "a", lease_seconds=4, renew_deadline_seconds=2, retry_seconds=retry
    )
    await LeaderElector(Kube(server), quick).acquire(asyncio.Event())  # "a" holds it from now on
    standby = LeaderElector(Kube(server), replace(quick, identity="b"))
    server.times.clear()
    stop = asyncio.Event()
    task = asyncio.create_task(standby.acquire(stop))
    await asyncio.sleep(0.75)
    stop.set()
    assert not await task
    reads = [at for method, at in server.times if method == "GET"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert len(gaps) >= 2, reads
    assert min(gaps) >= retry * 0.98, gaps  # the loop's timer may fire a hair early, never a sixth early


async def test_a_renewal_that_fails_once_is_retried_within_the_deadline_and_the_leader_keeps_leading() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    quick = LeaseConfig(NAMESPACE, "disagg-operator", "a", lease_seconds=4, renew_deadline_seconds=2, retry_seconds=0.1)
    a = LeaderElector(Kube(server), quick)  # the real clock: hold sleeps for real
    assert await a.acquire(asyncio.Event())
    server.fail(500, "etcdserver: leader changed", method="PUT", kind="Lease", times=1)
    before = len(server.requests)
    stop = asyncio.Event()
    task = asyncio.create_task(a.hold(stop))
    await asyncio.sleep(0.5)
    stop.set()
    async with asyncio.timeout(5):
        await task
    puts = [r for r in server.requests[before:] if r.method == "PUT" and "leases" in r.path]
    assert len(puts) >= 2  # the failed renewal and at least one after it
    assert a.leading and a.may_write()


async def test_a_leader_that_finds_the_lease_taken_logs_who_holds_it_now(caplog: pytest.LogCaptureFixture) -> None:
    """A leader whose clock stood still (a frozen VM) while the standby's ran a whole lease: its next renewal finds
    the Lease taken; it stops, and its log names the new holder."""
    server = FakeApiServer(namespaces=(NAMESPACE,))
    a_clock, b_clock = Clocks(), Clocks()
    quick = LeaseConfig(NAMESPACE, "disagg-operator", "a", lease_seconds=4, renew_deadline_seconds=2, retry_seconds=0.1)
    a = LeaderElector(Kube(server), quick, clock=a_clock)
    b = LeaderElector(Kube(server), replace(quick, identity="b"), clock=b_clock)
    assert await a.acquire(asyncio.Event())
    assert not await b._try()
    b_clock.now += 5  # only the standby's time passed
    assert await b._try()
    before = len(server.requests)
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        async with asyncio.timeout(5):
            await a.hold(asyncio.Event())
    assert not a.leading
    # The renewal's conflict, then one read that shows the new holder: it stands down on that, not a try later.
    assert [r.method for r in server.requests[before:] if "/leases" in r.path] == ["PUT", "GET"]
    assert "a lost the lease ops/disagg-operator (now held by b); it stops reconciling" in caplog.messages


async def test_losing_the_race_to_create_the_lease_is_quiet_other_failures_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        server.fail(409, 'leases.coordination.k8s.io "disagg-operator" already exists', method="POST", kind="Lease")
        assert not await a._try()  # another replica created it first: it will be read next time
        assert caplog.messages == []
        server.fail(500, "etcdserver: request timed out", method="POST", kind="Lease")
        assert not await a._try()
    [message] = caplog.messages
    assert message.startswith("creating lease ops/disagg-operator: 500") and "etcdserver: request timed out" in message


async def test_a_release_is_logged_with_the_lease_it_gave_up(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    with caplog.at_level(logging.INFO, logger="disagg.leader"):
        await a.release()
    assert lease(server)["holderIdentity"] == ""
    assert "released lease ops/disagg-operator" in caplog.messages, caplog.messages


async def test_a_release_the_api_server_refuses_is_logged_and_the_replica_stops_writing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    server.fail(500, "etcdserver: request timed out", method="PUT", kind="Lease")
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        await a.release()
    assert not a.leading and not a.may_write()
    assert lease(server)["holderIdentity"] == "a"  # the standby takes it once it expires
    [message] = [m for m in caplog.messages if "release" in m]
    assert message.startswith("could not release lease ops/disagg-operator: ")
    assert "etcdserver: request timed out" in message


class Recorded(FakeApiServer):
    """Also records the body of every request."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.bodies: list[tuple[str, Any]] = []

    async def request(self, method: str, path: str, query: Any, body: Any, content_type: str) -> Response:
        self.bodies.append((method, body))
        return await super().request(method, path, query, body, content_type)


async def test_the_first_replica_creates_a_complete_lease_naming_itself() -> None:
    server, clock = Recorded(), Clocks()
    a, _ = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    [created] = [body for method, body in server.bodies if method == "POST" and body["kind"] == "Lease"]
    assert (created["apiVersion"], created["kind"]) == ("coordination.k8s.io/v1", "Lease")
    assert created["metadata"] == {"name": "disagg-operator", "namespace": NAMESPACE}
    assert (created["spec"]["holderIdentity"], created["spec"]["leaseTransitions"]) == ("a", 0)


async def test_a_standby_waits_between_one_and_one_and_a_fifth_retry_periods_between_tries() -> None:
    """client-go's JitterUntil: the retry period plus up to 20% (`JITTER`), never less and never more."""
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    waits: list[float] = []
    stop = asyncio.Event()

    async def sleep(_stop: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 50:
            stop.set()

    b._sleep = sleep  # type: ignore[method-assign]
    assert not await b.acquire(stop)
    assert len(waits) == 50 and all(1.5 <= wait <= 1.5 * 1.2 for wait in waits), waits
    assert max(waits) - min(waits) > 0.01  # jittered, not one fixed wait
