"""Retries through the worker's bookkeeping (`Reconciler.process`): what a failing pass costs and when it comes
back. A permanent error is reported and retried ever more rarely; a transient one is retried quietly, then
reported, and its backoff keeps growing to the cap instead of starting over."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.kube import Response
from disagg.reconcile.metrics import REGISTRY
from disagg.reconcile.workqueue import WorkQueue
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import (
    MINIMAL,
    NAMESPACE,
    Harness,
    assert_comes_back_after,
    deployment_document,
    harness,
)

DOUBLING_TO_THE_CAP = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0]


async def one_pass(h: Harness) -> float | None:
    """What a worker does when the key comes up (its retry timer fired, or an event arrived): take it, run the
    pass and its bookkeeping, hand it back."""
    queue = h.reconciler.queue
    queue.add(h.key)
    key = await queue.get()
    try:
        return await h.reconciler.process(key)
    finally:
        queue.done(key)


async def test_a_permanent_error_is_reported_at_once_and_retried_with_growing_backoff() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, 'Service "m-router" is invalid: spec.ports', kind="Service", name="m-router", times=None)
    timed = REGISTRY.get_sample_value("disagg_reconcile_duration_seconds_count", {"result": "degraded"}) or 0.0
    delays = [await one_pass(h) for _ in DOUBLING_TO_THE_CAP]
    assert delays == DOUBLING_TO_THE_CAP
    assert h.reconciler.queue.failures(h.key) == len(DOUBLING_TO_THE_CAP)
    # Each pass finished and said the error in status: timed as degraded, apart from the passes that crash.
    degraded = REGISTRY.get_sample_value("disagg_reconcile_duration_seconds_count", {"result": "degraded"})
    assert degraded == timed + len(DOUBLING_TO_THE_CAP)
    assert h.condition("Degraded")["reason"] == "ApplyFailed"
    # One warning for the whole episode: the status said it once and did not change after.
    assert [e["reason"] for e in h.events() if e["type"] == "Warning"] == ["ApplyFailed"]


async def test_the_retry_is_scheduled_with_the_delay_chosen() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, "invalid", kind="Service", name="m-router", times=None)
    for expected in (1.0, 2.0, 4.0):
        started = asyncio.get_running_loop().time()
        assert await one_pass(h) == expected
        assert_comes_back_after(h, started, expected)


async def test_a_transient_error_is_retried_quietly_then_reported_and_its_backoff_never_restarts() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(500, "etcdserver: request timed out", method="PATCH", kind="Deployment", times=None)
    delays = []
    for attempt in range(len(DOUBLING_TO_THE_CAP)):
        delays.append(await one_pass(h))
        if attempt < 3:
            assert "status" not in h.owner(), attempt  # the first passes say nothing: it may clear by itself
    assert delays == DOUBLING_TO_THE_CAP
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "ApplyFailed" and "etcdserver: request timed out" in degraded["message"]


async def test_success_resets_the_backoff() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, "invalid", kind="Service", name="m-router", times=None)
    assert [await one_pass(h) for _ in range(3)] == [1.0, 2.0, 4.0]
    h.server.clear_faults()
    assert await one_pass(h) is None
    assert h.reconciler.queue.failures(h.key) == 0
    assert h.condition("Degraded")["status"] == "False"
    h.edit_spec(lambda spec: spec["decode"].update(replicas=2))  # something to apply again
    h.server.fail(409, "the object has been modified", method="PATCH", kind="Deployment", times=1)
    assert await one_pass(h) == 1.0  # a new failure starts from the base delay
    assert await one_pass(h) is None


@pytest.mark.parametrize("status", [409, 429, 500, 503])
async def test_one_transient_answer_costs_one_short_retry(status: int) -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(status, "try again", method="PATCH", kind="Service", times=1)
    assert await one_pass(h) == 1.0
    assert "status" not in h.owner()
    assert await one_pass(h) is None
    assert h.status["phase"] == "Pending"


async def test_a_transient_error_retried_quietly_is_logged_with_the_object_and_the_servers_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before the status says anything, the log is the only place a quiet retry shows: it names the object whose
    apply failed and the API server's answer."""
    h = harness(deployment_document(MINIMAL))
    h.server.fail(503, "etcdserver: leader changed", method="PATCH", kind="Service", name="m-router", times=1)
    with caplog.at_level(logging.WARNING, logger="disagg.reconcile"):
        assert await one_pass(h) == 1.0
    assert "status" not in h.owner()
    assert (
        "reconcile of ns/m will be retried in 1s: Service/m-router: 503 InternalError: etcdserver: leader changed"
        in caplog.messages
    ), caplog.messages


async def test_an_invalid_spec_is_not_retried() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"]["tensorParallel"] = 3
    document["spec"]["prefill"]["tensorParallel"] = 2
    h = harness(document)
    assert await one_pass(h) is None  # nothing changes until the spec does
    assert h.status["phase"] == "Invalid" and h.reconciler.queue.due_in(h.key) is None


class Crashing(FakeApiServer):
    """An answer the client cannot parse: a bug's stand-in, which must not stop the worker."""

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        if method == "PATCH" and path.endswith("/services/m-router"):
            return Response(200, "OK", b"{not json")
        return await super().request(method, path, query, body, content_type)


async def test_an_unexpected_exception_backs_off_like_any_failure() -> None:
    h = harness(deployment_document(MINIMAL), Crashing(namespaces=(NAMESPACE,)))
    before = REGISTRY.get_sample_value("disagg_reconcile_errors_total", {"reason": "unexpected"}) or 0.0
    timed = REGISTRY.get_sample_value("disagg_reconcile_duration_seconds_count", {"result": "error"}) or 0.0
    for expected in (1.0, 2.0, 4.0, 8.0):
        started = asyncio.get_running_loop().time()
        assert await one_pass(h) == expected
        assert_comes_back_after(h, started, expected)  # the key itself comes back after that delay
    assert h.reconciler.queue.failures(h.key) == 4
    # Counted apart from the transient errors, so an alert can tell a bug from a flaky API server.
    assert REGISTRY.get_sample_value("disagg_reconcile_errors_total", {"reason": "unexpected"}) == before + 4
    assert REGISTRY.get_sample_value("disagg_reconcile_duration_seconds_count", {"result": "error"}) == timed + 4


async def test_an_autoscaled_deployment_with_an_apply_error_retries_before_its_next_evaluation() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"] = {"replicas": 1, "autoscaling": {"enabled": True, "maxReplicas": 4}}
    document["spec"]["scaling"] = {"slo": {"itlP90": "50ms"}, "interval": "60s"}
    h = harness(document)
    # No pods run in the fake cluster, so the scaler finds no metrics and holds; its next evaluation is due in 60 s.
    h.reconciler.autoscaler = Autoscaler(h.reconciler.kube, wall_clock=lambda: 1000.0)
    h.server.fail(422, "invalid", kind="Service", name="m-router", times=None)
    assert await one_pass(h) == 1.0
    due = h.reconciler.queue.due_in(h.key)
    assert due is not None and due <= 1.0  # the retry, not the scaler's 60 s interval


async def test_the_running_worker_comes_back_after_a_failure_and_converges() -> None:
    h = harness(deployment_document(MINIMAL))
    h.reconciler.queue = WorkQueue(base_delay=0.01, max_delay=0.05)
    h.server.fail(500, "etcdserver: leader changed", method="PATCH", kind="Deployment", name="m-router", times=2)
    passes: list[str] = []
    reconcile = h.reconciler.reconcile

    async def counted(key: tuple[str, str]) -> str:
        passes.append(key[1])
        return await reconcile(key)

    h.reconciler.reconcile = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    runner = asyncio.create_task(h.reconciler.run(workers=1, resync_seconds=3600, stop=stop))
    h.reconciler.request(h.key)
    try:
        async with asyncio.timeout(10):
            # The status is written before the pass ends (its events go out after it), and the queue forgets the
            # failures only when the pass returns: wait for both, or the worker can be stopped in between.
            while (h.owner().get("status") or {}).get("phase") != "Pending" or h.reconciler.queue.failures(h.key):
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await runner
    assert passes == ["m"] * 3  # two failed passes, each retried once by its timer, then one that succeeded
    assert h.reconciler.queue.failures(h.key) == 0


async def test_an_unexpected_exception_is_reported_in_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a bug in a step after the pure core (here: observing the children) made every pass fail with
    only a log line, so the DisaggDeployment kept no status, or a stale one, while being retried forever."""
    h = harness(deployment_document(MINIMAL))

    async def broken(*_: Any) -> None:
        raise KeyError("metadata")

    monkeypatch.setattr(h.reconciler, "_observe", broken)
    assert [await one_pass(h) for _ in range(3)] == [1.0, 2.0, 4.0]
    degraded = h.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ReconcileFailed"
    assert "KeyError: 'metadata'" in degraded["message"] and "report" in degraded["message"]
    assert h.status["phase"] == "Degraded" and "observedGeneration" not in h.status
    assert [e["reason"] for e in h.events() if e["type"] == "Warning"] == ["ReconcileFailed"]  # once, not per retry
    monkeypatch.undo()
    assert await one_pass(h) is None
    assert h.condition("Degraded")["status"] == "False" and h.status["observedGeneration"] == 1


async def test_a_pass_that_keeps_failing_before_its_status_step_is_reported_after_a_few_tries() -> None:
    """An API server that times out reading a child to claim it (D70, D150) fails every pass before anything is
    applied: first retried quietly, then said in status. (The pass lists nothing: the children come from the watch
    cache, D121, so the read that fails is the claim's, of a second-wave child not created yet, D191.)"""
    h = harness(deployment_document(MINIMAL))
    h.server.fail(503, "etcdserver: request timed out", method="GET", kind="Deployment", name="m-prefill", times=None)
    for attempt in range(3):
        await one_pass(h)
        assert "status" not in h.owner(), attempt
    await one_pass(h)
    degraded = h.condition("Degraded")
    assert degraded["reason"] == "ReconcileFailed" and "etcdserver: request timed out" in degraded["message"]


async def test_a_failure_the_status_cannot_report_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """When even the status write fails, the log says that the failure went unreported, and why."""
    h = harness(deployment_document(MINIMAL))

    async def broken(*_: Any) -> None:
        raise KeyError("metadata")

    monkeypatch.setattr(h.reconciler, "_observe", broken)
    h.server.fail(500, "etcdserver: request timed out", method="PATCH", kind="DisaggDeployment", times=None)
    with caplog.at_level(logging.WARNING, logger="disagg.reconcile"):
        assert await one_pass(h) == 1.0
    assert "status" not in h.owner()
    [message] = [m for m in caplog.messages if "could not report" in m]
    assert message.startswith("could not report the failure of ns/m in status: ")
    assert "etcdserver: request timed out" in message


async def test_standing_down_drops_the_backoff_and_keeps_the_queues_delays() -> None:
    """A replica that stops leading drops its queue (the next leader starts each key afresh) but not how it backs
    off: on its return a failing key again doubles from the base delay up to the same cap."""
    h = harness(deployment_document(MINIMAL))
    h.reconciler.queue = WorkQueue(base_delay=0.5, max_delay=2.0)
    h.server.fail(422, "invalid", kind="Service", name="m-router", times=None)
    assert [await one_pass(h) for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
    h.reconciler.stand_down()
    assert h.reconciler.queue.failures(h.key) == 0 and h.reconciler.queue.due_in(h.key) is None
    assert [await one_pass(h) for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
