"""Behaviours seed 27's draw of mutants found unasserted (docs/testing.md, seventh round): the status clock's
format, a crashed pass's generation, a child replaced during a pass, the queue-wait lane, the RollingBack event's
type, frontends that stopped running, the gauges of a deleted DisaggDeployment, the serving counts kept while no
frontend answers, an invalid spec's problems together, the refused Prometheus URL, kubectl's last-applied copy, and
the namespace the pure core renders into."""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from disagg.api.validate import validate_deployment
from disagg.reconcile.cache import LAST_APPLIED, strip
from disagg.reconcile.metrics import REGISTRY
from disagg.reconcile.reconciler import rfc3339_now
from disagg.reconcile.rendered import Core, compute
from disagg.reconcile.workqueue import WorkQueue
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness
from tests.support.serving import controlled, make_pod
from tests.unit.reconcile.test_metrics_access import _step
from tests.unit.reconcile.test_pass_backoff import one_pass
from tests.unit.reconcile.test_pass_serving import _serving, reasons, stuck_rollout

UID_MISMATCH = (
    'Operation cannot be fulfilled on serviceaccounts "m-router": Precondition failed: UID in precondition: a, '
    "UID in object meta: b (uid mismatch)"
)


def sample(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_the_status_clock_is_rfc3339_in_utc() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    stamp = rfc3339_now()
    after = datetime.now(UTC)
    parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= parsed <= after and len(stamp) == 20


async def test_a_crashing_pass_keeps_the_generation_it_last_reconciled(monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness(deployment_document(MINIMAL))
    assert await one_pass(h) is None
    assert h.status["observedGeneration"] == 1
    h.edit_spec(lambda spec: spec["decode"].update(replicas=2))

    async def broken(*_: Any) -> None:
        raise KeyError("metadata")

    monkeypatch.setattr(h.reconciler, "_observe", broken)
    assert await one_pass(h) == 1.0
    degraded = h.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ReconcileFailed")
    # Generation 2 was not reconciled: the condition says it was written while generation 1 was the last one.
    assert degraded["observedGeneration"] == 1 and h.status["observedGeneration"] == 1


async def test_a_child_replaced_during_the_pass_retries_the_pass_and_the_others_are_still_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = harness(deployment_document(MINIMAL))
    assert await one_pass(h) is None
    h.forget_applied()  # the next pass sends every child again, the ServiceAccount first
    h.server.fail(409, UID_MISMATCH, method="PATCH", kind="ServiceAccount", name="m-router", reason="Conflict", times=1)
    services = sample("disagg_objects_applied_total", kind="Service") or 0.0
    with caplog.at_level(logging.WARNING, logger="disagg.reconcile"):
        assert await one_pass(h) == 1.0
    assert [m for m in caplog.messages if "will be retried" in m] == [
        "reconcile of ns/m will be retried in 1s: ServiceAccount/m-router was replaced during the pass"
    ]
    # The answers after the replaced one were still taken: applied, counted and remembered.
    assert (sample("disagg_objects_applied_total", kind="Service") or 0.0) == services + 4
    sent = len(h.server.requests)
    assert await one_pass(h) is None
    again = [r.path for r in h.server.requests[sent:] if r.method == "PATCH"]
    assert "/api/v1/namespaces/ns/serviceaccounts/m-router" in again
    assert not [path for path in again if "/services/" in path or "/roles/" in path], again


async def test_a_taken_key_counts_its_wait_under_its_lane() -> None:
    h = harness(deployment_document(MINIMAL))
    h.reconciler.queue = WorkQueue(base_delay=0.01, max_delay=0.05)
    before = {lane: sample("disagg_reconcile_queue_wait_seconds_count", lane=lane) or 0.0 for lane in ("event",)}
    stop = asyncio.Event()
    runner = asyncio.create_task(h.reconciler.run(workers=1, resync_seconds=3600, stop=stop))
    h.reconciler.request(h.key)
    try:
        async with asyncio.timeout(10):
            while "status" not in h.owner():
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await runner
    waits = {
        lane: sample("disagg_reconcile_queue_wait_seconds_count", lane=lane) or 0.0
        for lane in ("change", "event", "revisit")
    }
    assert waits["event"] == before["event"] + 1, waits


async def test_rolling_back_a_stuck_rollout_is_a_warning_event() -> None:
    h, _, _ = await stuck_rollout("prefill", "decode")
    assert "RollingBack" in reasons(h)
    [event] = h.events("RollingBack")
    assert event["type"] == "Warning"
    assert event["message"].startswith("the rollout is stuck; going back to pairing revision old")


async def test_a_frontend_pod_that_failed_is_not_asked_though_it_keeps_its_ip() -> None:
    h, frontend, clock = await _serving()
    probed = len(frontend.probed)
    failed = make_pod("m", "m-router-b", "router", ready=False, ip="10.9.0.2")
    failed["status"]["phase"] = "Failed"  # evicted: the kubelet keeps the IP in its status
    h.server.remove("Pod", NAMESPACE, "m-router-a")
    h.server.create(controlled(h.server, failed))
    clock.now += 10
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("False", "NoFrontend"), serving
    assert len(frontend.probed) == probed


async def test_without_a_frontend_the_serving_counts_of_the_last_check_are_kept() -> None:
    h, _frontend, clock = await _serving()
    assert (h.status["prefill"]["servingReplicas"], h.status["decode"]["servingReplicas"]) == (1, 1)
    h.server.remove("Pod", NAMESPACE, "m-router-a")
    clock.now += 10
    await h.reconcile()
    assert h.condition("Serving")["reason"] == "NoFrontend"
    # Nothing was checked: what the engines served when last checked stands, rather than zero.
    assert (h.status["prefill"]["servingReplicas"], h.status["decode"]["servingReplicas"]) == (1, 1)


async def test_a_forgotten_deployment_leaves_no_serving_series_behind() -> None:
    h, _frontend, _clock = await _serving()
    labels = {"namespace": NAMESPACE, "name": "m"}
    states = ("passing", "failing", "drained")
    assert [sample("disagg_serving_pairs", **labels, state=s) for s in states] == [1.0, 0.0, 0.0]
    h.reconciler.forget(h.key)
    assert [sample("disagg_serving_pairs", **labels, state=s) for s in states] == [None, None, None]
    assert sample("disagg_serving", **labels) is None


async def test_every_problem_of_an_invalid_spec_is_in_the_condition_in_order() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["prefill"]["replicas"] = -1
    document["spec"]["decode"]["replicas"] = -3
    problems = [str(problem) for problem in validate_deployment(copy.deepcopy(document)).problems]
    assert len(problems) == 2
    h = harness(document)
    await h.reconcile()
    assert h.condition("SpecValid")["message"] == "; ".join(problems)
    assert h.status["phase"] == "Invalid"


async def test_the_refused_prometheus_url_is_named_in_the_condition() -> None:
    condition = await _step("http://metrics.other-team:9090", allowed=("http://prometheus.monitoring:9090",))
    assert condition.startswith(
        "False MetricsSourceNotAllowed: spec.scaling.metrics.prometheus.url http://metrics.other-team:9090 is not a "
        "Prometheus this operator was installed to query (allowed: "
    ), condition


def test_the_cache_drops_kubectls_copy_of_the_last_applied_object_and_keeps_other_annotations() -> None:
    obj = {
        "kind": "Service",
        "metadata": {"name": "s", "annotations": {LAST_APPLIED: '{"big": "copy"}', "team": "a"}},
        "spec": {},
    }
    stripped = strip(obj)
    assert stripped["metadata"]["annotations"] == {"team": "a"}
    assert LAST_APPLIED in obj["metadata"]["annotations"]  # the caller's object is left as it was


def test_the_core_renders_into_the_namespace_it_is_given() -> None:
    owner = deployment_document(MINIMAL)
    core = compute(owner, "elsewhere")
    assert isinstance(core, Core)
    assert {obj["metadata"]["namespace"] for obj in core.desired()} == {"elsewhere"}
