"""The scaler inside the pass (D23): the real Autoscaler and its real metrics source scrape engine pods over HTTP
(tests/support/engines.py), the real policy decides, and replicas are written through the replicas field manager
of the fake API server. Time is the test's: the scaler's wall clock moves only when a test says so."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from disagg.metrics_sources.direct import DirectSource
from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.children import FIELD_MANAGER, REPLICAS_MANAGER
from disagg.reconcile.kube import Response
from disagg.reconcile.ownership import manages_replicas
from tests.support.engines import EnginePods
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import (
    MINIMAL,
    NAMESPACE,
    NOW,
    Harness,
    assert_comes_back_after,
    deployment_document,
    harness,
    reconciler_for,
)

INTERVAL = 15.0


@dataclass
class Scaled:
    """A DisaggDeployment whose decode pool the operator scales, its engine pods, and the scaler's clock."""

    h: Harness
    pods: EnginePods
    autoscaler: Autoscaler
    now: float = 1000.0

    async def step(self, seconds: float = INTERVAL) -> str:
        """One pass, the controllers' and kubelets' answer to it, then time moves on."""
        outcome = await self.h.reconcile()
        await self.pods.sync()
        self.now += seconds
        return outcome

    def decode(self) -> dict[str, Any]:
        found = self.h.server.get("Deployment", NAMESPACE, "m-decode")
        assert found is not None
        return found

    @property
    def replicas(self) -> int:
        return int(self.decode()["spec"]["replicas"])

    def scaling(self) -> dict[str, Any]:
        return self.h.condition("ScalingActive")


def autoscaled(decode: dict[str, Any] | None = None, scaling: dict[str, Any] | None = None) -> dict[str, Any]:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"] = decode or {"replicas": 1, "autoscaling": {"enabled": True, "maxReplicas": 6}}
    document["spec"]["scaling"] = scaling or {"slo": {"itlP90": "25ms"}, "interval": "15s"}
    return document


async def scaled_harness(document: dict[str, Any], server: FakeApiServer | None = None) -> AsyncIterator[Scaled]:
    h = harness(document, server)
    scaled = Scaled(h, None, None)  # type: ignore[arg-type]
    async with EnginePods(h.server, NAMESPACE, lambda: scaled.now) as pods:
        autoscaler = Autoscaler(h.reconciler.kube, wall_clock=lambda: scaled.now)
        autoscaler.direct = DirectSource(port=pods.port)
        h.reconciler.autoscaler = autoscaler
        scaled.pods, scaled.autoscaler = pods, autoscaler
        try:
            yield scaled
        finally:
            await autoscaler.close()


@pytest.fixture
async def busy() -> AsyncIterator[Scaled]:
    """Decode at 1 replica with 100 sequences to generate: more than one engine holds at a 25 ms ITL."""
    async for scaled in scaled_harness(autoscaled()):
        scaled.pods.loads["decode"].sequences = 100
        yield scaled


async def test_the_scaler_waits_for_pods_then_for_a_window_then_scales_up(busy: Scaled) -> None:
    await busy.step()
    assert busy.scaling()["reason"] == "MetricsMissing"
    assert "no metrics from any ready decode pod" in busy.scaling()["message"]  # no pods yet
    await busy.step()
    assert busy.scaling()["reason"] == "MetricsMissing"
    assert "first scrape: rates need two samples" in busy.scaling()["message"]
    assert busy.replicas == 1
    await busy.step()
    scaled_to = busy.replicas
    assert 1 < scaled_to <= 6
    assert (busy.scaling()["status"], busy.scaling()["reason"]) == ("True", "Evaluated")
    decode = busy.h.status["decode"]
    assert decode["desiredReplicas"] == scaled_to
    assert decode["lastScaleTime"] == NOW
    assert decode["lastScaleReason"].startswith(f"decode 1 -> {scaled_to} (scale up): need ")
    scaled_up = [e["message"] for e in busy.h.events("ScaledUp")]
    assert scaled_up == [f"decode 1 -> {scaled_to}: {decode['lastScaleReason']}"]
    assert [e["type"] for e in busy.h.events("ScaledUp")] == ["Normal"]  # a scale is not a warning
    # The count is the scaler's: written by the replicas manager, not part of the operator's main apply.
    assert manages_replicas(busy.decode(), REPLICAS_MANAGER) and not manages_replicas(busy.decode(), FIELD_MANAGER)
    prefill = busy.h.server.get("Deployment", NAMESPACE, "m-prefill")
    assert prefill is not None and prefill["spec"]["replicas"] == 2  # not scaled: the spec's count
    assert busy.h.status["phase"] == "Progressing"  # the new replica is not ready yet
    await busy.step()
    assert busy.h.status["decodeReady"] == f"{scaled_to}/{scaled_to}"


async def test_every_ready_engine_is_scraped_once_per_interval_and_only_when_due(busy: Scaled) -> None:
    for _ in range(3):  # evaluations at 1000, 1015 and 1030 s
        await busy.step()
    engines = dict(busy.pods.engines)
    scrapes = {pod: engine.scrapes for pod, engine in engines.items()}
    assert {engine.role for engine in engines.values()} == {"prefill", "decode"}  # both pools are observed
    replicas = busy.replicas
    for early in (1035.0, 1044.0):  # passes that come early (a child changed): the scaler is not due
        busy.now = early
        await busy.h.reconcile()
        assert {pod: engine.scrapes for pod, engine in engines.items()} == scrapes
        assert busy.replicas == replicas
    busy.now = 1045.0
    await busy.h.reconcile()
    assert {pod: engine.scrapes for pod, engine in engines.items()} == {pod: n + 1 for pod, n in scrapes.items()}


async def test_the_pass_comes_back_when_the_next_evaluation_is_due(busy: Scaled) -> None:
    started = asyncio.get_running_loop().time()
    await busy.step()
    assert_comes_back_after(busy.h, started, INTERVAL)


async def test_the_scaler_never_goes_past_max_replicas() -> None:
    document = autoscaled(decode={"replicas": 1, "autoscaling": {"enabled": True, "maxReplicas": 2}})
    async for scaled in scaled_harness(document):
        scaled.pods.loads["decode"].sequences = 5000
        for _ in range(8):
            await scaled.step()
            assert scaled.replicas <= 2
        assert scaled.replicas == 2
        assert "maxReplicas" in scaled.h.status["decode"]["lastScaleReason"]


async def test_an_idle_pool_shrinks_one_step_at_a_time_after_the_window_down_to_its_minimum() -> None:
    document = autoscaled(
        decode={"replicas": 3, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 6}},
        scaling={"slo": {"itlP90": "25ms"}, "interval": "15s", "scaleDown": {"stabilizationWindow": "60s"}},
    )
    async for scaled in scaled_harness(document):
        history = []
        for _ in range(10):
            await scaled.step()
            history.append(scaled.replicas)
        assert history[0] == 3 and history[-1] == 1
        steps = [a - b for a, b in itertools.pairwise(history) if a != b]
        assert steps == [1, 1]  # never more than the default step of one
        first_drop = next(i for i, n in enumerate(history) if n < 3)
        assert first_drop * INTERVAL >= 60  # not before the stabilisation window has passed
        assert [e["message"].split(":")[0] for e in scaled.h.events("ScaledDown")] == ["decode 3 -> 2", "decode 2 -> 1"]


async def test_an_engine_that_stops_answering_holds_the_pool_and_says_which(busy: Scaled) -> None:
    for _ in range(4):
        await busy.step()
    before = busy.replicas
    silent = sorted(busy.pods.engines)[0]
    busy.pods.engines[silent].answering = False
    busy.pods.loads["decode"].sequences = 1000  # a reason to scale, which must not be acted on
    await busy.step()
    condition = busy.scaling()
    assert (condition["status"], condition["reason"]) == ("False", "MetricsPartial")
    assert silent in condition["message"] and f"holding decode at {before}" in condition["message"]
    assert busy.replicas == before
    assert busy.h.status["phase"] != "Degraded"  # serving is not affected by a metrics gap


async def test_a_spec_edit_does_not_reset_the_scaled_count(busy: Scaled) -> None:
    for _ in range(3):
        await busy.step()
    scaled_to = busy.replicas
    assert scaled_to > 1
    busy.h.edit_spec(lambda spec: spec["decode"].update(replicas=1, engine={"maxModelLen": 4096}))
    await busy.step(seconds=1)
    assert busy.replicas == scaled_to
    assert "--max-model-len" in busy.decode()["spec"]["template"]["spec"]["containers"][0]["args"]


async def test_turning_the_scaler_off_hands_the_count_back_and_drops_its_condition(busy: Scaled) -> None:
    for _ in range(3):
        await busy.step()
    assert busy.replicas > 1
    busy.h.edit_spec(lambda spec: spec["decode"].pop("autoscaling"))
    await busy.step()
    assert busy.replicas == 1 and manages_replicas(busy.decode(), FIELD_MANAGER)
    assert busy.h.key not in busy.autoscaler.states
    assert busy.scaling() == {}  # nothing is scaled, so there is no scaling activity to report
    assert busy.h.status["decode"]["lastScaleTime"] == NOW  # history is kept


async def test_a_deleted_deployment_is_forgotten_by_the_scaler(busy: Scaled) -> None:
    for _ in range(3):
        await busy.step()
    assert busy.h.key in busy.autoscaler.states
    busy.h.server.remove("DisaggDeployment", NAMESPACE, "m")
    assert await busy.h.reconcile() == "gone"
    assert busy.h.key not in busy.autoscaler.states and busy.h.key not in busy.autoscaler.next_due


class RefusesReplicas(FakeApiServer):
    """Answers the replicas manager's applies (the scaler's writes) with the given error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.refusal: tuple[int, str] | None = None
        self._error = (status, message)

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        if self.refusal and dict(query).get("fieldManager") == REPLICAS_MANAGER:
            from tests.support.fake_kube import status_error

            return status_error(self.refusal[0], "Refused", self.refusal[1])
        return await super().request(method, path, query, body, content_type)


@pytest.mark.parametrize(
    ("status", "reported"),
    [(500, False), (422, True)],
    ids=["transient-retried", "permanent-reported"],
)
async def test_a_refused_replicas_write(status: int, reported: bool) -> None:
    server = RefusesReplicas(status, "replicas: admission says no")
    async for scaled in scaled_harness(autoscaled(), server):
        scaled.pods.loads["decode"].sequences = 100
        await scaled.step()
        await scaled.step()
        server.refusal = (status, "replicas: admission says no")
        delay = await scaled.h.reconciler.process(scaled.h.key)
        assert delay == 1.0
        assert scaled.replicas == 1
        degraded = scaled.h.condition("Degraded")
        if reported:
            assert degraded["reason"] == "ApplyFailed"
            assert "scaling: 422 Refused: replicas: admission says no" in degraded["message"]
        else:
            assert degraded["status"] == "False"  # retried quietly first, like any transient error


async def shrinking(takeover_at: int | None, keep_memory: bool = True) -> list[int]:
    """The idle pool of the test above, over ten intervals; at `takeover_at` another replica (a new reconciler
    and scaler, as after a failover) takes over, with or without what the old one wrote to status."""
    document = autoscaled(
        decode={"replicas": 3, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 6}},
        scaling={"slo": {"itlP90": "25ms"}, "interval": "15s", "scaleDown": {"stabilizationWindow": "60s"}},
    )
    history = []
    async for scaled in scaled_harness(document):
        for step in range(10):
            if step == takeover_at:
                if not keep_memory:
                    status = dict(scaled.h.status)
                    status.pop("scalerState")
                    scaled.h.server.set_status("DisaggDeployment", NAMESPACE, "m", status)
                scaled.h.reconciler.watching.stop()
                scaled.h.reconciler = reconciler_for(scaled.h.server, instance="standby")
                successor = Autoscaler(scaled.h.reconciler.kube, wall_clock=lambda s=scaled: s.now)
                successor.direct = DirectSource(port=scaled.pods.port)
                await scaled.autoscaler.close()
                scaled.autoscaler = scaled.h.reconciler.autoscaler = successor
            await scaled.step()
            history.append(scaled.replicas)
    return history


async def test_a_new_leader_continues_the_scalers_state_from_status_so_no_pool_flaps() -> None:
    alone = await shrinking(takeover_at=None)
    handed_over = await shrinking(takeover_at=4)
    assert handed_over == alone  # the same decisions at the same times, as if nothing had happened
    forgetful = await shrinking(takeover_at=4, keep_memory=False)
    assert forgetful != alone  # without the state the window starts over: the memory is what keeps the timing
