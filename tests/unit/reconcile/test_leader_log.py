"""What the Lease elector says in its log, the Lease times it writes, and the handover Event, exactly: the log is
how an operator's reader follows leadership, and the Lease's MicroTime is what the API server validates."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace

import pytest

from disagg.reconcile.kube import Kube
from disagg.reconcile.leader import LeaderElector, micro_time
from tests.support.fake_kube import FakeApiServer
from tests.unit.reconcile.test_leader import NAMESPACE, Clocks, config, electors, lease


def test_lease_times_are_rfc3339_with_microseconds() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro_time()), micro_time()


async def test_the_first_leader_logs_that_it_leads_and_the_lease_it_holds(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    with caplog.at_level(logging.INFO, logger="disagg.leader"):
        assert await a.acquire(asyncio.Event())
    assert "a became the leader (lease ops/disagg-operator)" in caplog.messages, caplog.messages
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", str(lease(server)["renewTime"]))


async def test_a_takeover_logs_whom_it_took_over_from(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, b = electors(server, clock)
    assert await a.acquire(asyncio.Event())
    assert not await b._try()
    clock.now += 9
    with caplog.at_level(logging.INFO, logger="disagg.leader"):
        assert await b.acquire(asyncio.Event())
    assert "b became the leader (lease ops/disagg-operator, taking over from a)" in caplog.messages
    [event] = [e for e in server.objects("Event", NAMESPACE) if e["reason"] == "LeaderElection"][-1:]
    assert event["message"] == "b became leader, taking over from a"


async def test_a_leader_whose_renewals_fail_until_the_deadline_says_it_was_not_renewed_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    a = LeaderElector(Kube(server), config("a"), clock=asyncio.get_running_loop().time)
    assert await a.acquire(asyncio.Event())
    a.config = replace(a.config, lease_seconds=0.4, renew_deadline_seconds=0.2, retry_seconds=0.05)
    server.fail(500, "etcdserver: request timed out", method="PUT", kind="Lease", times=None)
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        async with asyncio.timeout(5):
            await a.hold(asyncio.Event())
    assert not a.leading
    assert "a lost the lease ops/disagg-operator (not renewed in time); it stops reconciling" in caplog.messages
    updates = [m for m in caplog.messages if m.startswith("updating lease")]
    assert updates and updates[0].startswith("updating lease ops/disagg-operator: 500"), updates


async def test_a_lease_that_cannot_be_read_is_logged_and_not_taken(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    server.fail(500, "etcdserver: request timed out", method="GET", kind="Lease")
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        assert not await a._try()
    [message] = caplog.messages
    assert message.startswith("reading lease ops/disagg-operator: 500"), message
    assert server.get("Lease", NAMESPACE, "disagg-operator") is None


async def test_a_handover_event_the_api_server_refuses_is_logged_and_the_replica_still_leads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, clock = FakeApiServer(namespaces=(NAMESPACE,)), Clocks()
    a, _ = electors(server, clock)
    server.fail(403, "events is forbidden", method="POST", kind="Event")
    with caplog.at_level(logging.WARNING, logger="disagg.leader"):
        assert await a.acquire(asyncio.Event())
    assert a.leading
    [message] = caplog.messages
    assert message.startswith("could not record the leader election event: 403"), message
