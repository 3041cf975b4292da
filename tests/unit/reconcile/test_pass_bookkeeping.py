"""What a pass's bookkeeping tells the operator's reader, exactly: the log lines of a stopped, retried or crashed
pass, the metric labels they count under (dashboards and alerts select on them), and the status messages of a pass
that keeps failing. `Reconciler.process` through the fake API server."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from disagg.reconcile.metrics import REGISTRY
from tests.support.reconciling import MINIMAL, deployment_document, harness
from tests.unit.reconcile.test_pass_backoff import one_pass


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_pass_that_loses_the_lease_is_logged_and_timed_as_not_leader_and_not_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = harness(deployment_document(MINIMAL))
    h.reconciler.kube.may_write = lambda: False
    timed = sample("disagg_reconcile_duration_seconds_count", result="not_leader")
    with caplog.at_level(logging.INFO, logger="disagg.reconcile"):
        assert await one_pass(h) is None
    assert sample("disagg_reconcile_duration_seconds_count", result="not_leader") == timed + 1
    [line] = [m for m in caplog.messages if "stopped" in m]
    assert line.startswith("pass of ns/m stopped: "), line
    assert h.reconciler.queue.failures(h.key) == 0 and "status" not in h.owner()


async def test_a_transient_failure_counts_as_transient_and_is_timed_as_retry() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(503, "etcdserver: leader changed", method="PATCH", kind="Service", name="m-router", times=1)
    errors = sample("disagg_reconcile_errors_total", reason="transient")
    timed = sample("disagg_reconcile_duration_seconds_count", result="retry")
    assert await one_pass(h) == 1.0
    assert sample("disagg_reconcile_errors_total", reason="transient") == errors + 1
    assert sample("disagg_reconcile_duration_seconds_count", result="retry") == timed + 1
    # The next pass succeeds, timed as ok.
    ok = sample("disagg_reconcile_duration_seconds_count", result="ok")
    assert await one_pass(h) is None
    assert sample("disagg_reconcile_duration_seconds_count", result="ok") == ok + 1


async def test_transient_failures_past_the_quiet_retries_say_how_many_passes_failed_and_why() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(503, "etcdserver: request timed out", method="GET", kind="Deployment", name="m-prefill", times=None)
    for _ in range(4):
        await one_pass(h)
    message = h.condition("Degraded")["message"]
    assert message.startswith("the last 4 passes failed before finishing (")
    assert message.endswith("etcdserver: request timed out); retrying"), message
    await one_pass(h)
    assert h.condition("Degraded")["message"].startswith("the last 5 passes failed before finishing (")


async def test_a_crashing_pass_is_logged_with_its_retry_delay_and_reported_as_a_bug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness(deployment_document(MINIMAL))

    async def broken(*_: Any) -> None:
        raise KeyError("metadata")

    monkeypatch.setattr(h.reconciler, "_observe", broken)
    with caplog.at_level(logging.ERROR, logger="disagg.reconcile"):
        assert await one_pass(h) == 1.0
        assert await one_pass(h) == 2.0
    crashes = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert [r.getMessage() for r in crashes] == [
        "reconcile of ns/m failed unexpectedly; retrying in 1s",
        "reconcile of ns/m failed unexpectedly; retrying in 2s",
    ]
    assert all(r.exc_info is not None for r in crashes)  # the traceback goes with it
    assert h.condition("Degraded")["message"] == (
        "the operator failed reconciling this DisaggDeployment (KeyError: 'metadata') and retries with backoff; "
        "this is a bug in disagg-operator: please report it with the operator's log"
    )


async def test_an_event_the_api_server_refuses_is_logged_with_its_reason_and_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, "Event is invalid", method="POST", kind="Event", times=None)
    h.server.fail(422, "invalid", kind="Service", name="m-router", times=None)
    with caplog.at_level(logging.WARNING, logger="disagg.reconcile"):
        await one_pass(h)
    assert h.condition("Degraded")["reason"] == "ApplyFailed"  # the status still says it all
    lines = [m for m in caplog.messages if m.startswith("could not record event")]
    assert lines == [
        "could not record event Created for ns/m: 422 InternalError: Event is invalid",
        "could not record event ApplyFailed for ns/m: 422 InternalError: Event is invalid",
    ]
