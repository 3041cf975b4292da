"""The serving check's reasons and metrics for each way of checking: the endpoint check through a router or the
decode engines, with nothing to ask or a first failure, and the counters and gauges dashboards read
(`disagg_serving_checks_total{method,result}`, `disagg_serving_pairs{state}`)."""

from __future__ import annotations

from disagg.reconcile.metrics import REGISTRY
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document
from tests.support.serving import checked_harness, create_pod
from tests.unit.reconcile.test_pass_serving import _serving_two_by_two

VLLM_ROUTER = MINIMAL.replace(
    "decode: {replicas: 1}",
    "decode: {replicas: 1}\n  serving: {check: {failureThreshold: 2}}\n"
    "  frontend: {router: {implementation: vllm-router}}",
)
NO_ROUTER = MINIMAL.replace(
    "decode: {replicas: 1}",
    "decode: {replicas: 1}\n  transfer: {connector: custom, custom: {connectorClass: ExampleConnector}}",
)


def checks(method: str, result: str) -> float:
    return REGISTRY.get_sample_value("disagg_serving_checks_total", {"method": method, "result": result}) or 0.0


def pairs_gauge(state: str) -> float | None:
    return REGISTRY.get_sample_value("disagg_serving_pairs", {"namespace": NAMESPACE, "name": "m", "state": state})


async def test_an_endpoint_check_with_no_router_pod_is_not_serving_and_says_which_pod_is_missing() -> None:
    h, frontend, _clock = checked_harness(deployment_document(VLLM_ROUTER))
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"], serving["message"]) == (
        "False",
        "NoFrontend",
        "no router pod is ready, so nothing can be served",
    )
    assert frontend.completions == 0


async def test_without_a_router_the_endpoint_check_names_the_decode_engines() -> None:
    h, _frontend, _clock = checked_harness(deployment_document(NO_ROUTER))
    await h.reconcile()
    serving = h.condition("Serving")
    assert (serving["reason"], serving["message"]) == (
        "NoFrontend",
        "no decode engine pod is ready, so nothing can be served",
    )


async def test_a_first_endpoint_failure_below_the_threshold_leaves_serving_unknown_and_counts_as_failing() -> None:
    h, frontend, _clock = checked_harness(deployment_document(VLLM_ROUTER), completions_ok=False)
    await h.reconcile()
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    assert h.reconciler.serving is not None
    h.reconciler.serving.forget(h.key)  # as a replica that just started: no round remembered
    failing = checks("endpoint", "failing")
    await h.reconcile()
    assert frontend.completions == 1
    serving = h.condition("Serving")
    assert (serving["status"], serving["reason"]) == ("Unknown", "NotChecked")
    assert serving["message"] == "a completion through the router at 10.9.0.1:8000 failed: 502 Bad Gateway"
    assert checks("endpoint", "failing") == failing + 1


async def test_an_endpoint_that_serves_counts_as_serving() -> None:
    h, _frontend, _clock = checked_harness(deployment_document(VLLM_ROUTER))
    await h.reconcile()
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    served = checks("endpoint", "serving")
    await h.reconcile()
    assert h.condition("Serving")["status"] == "True"
    assert checks("endpoint", "serving") == served + 1


async def test_pair_rounds_count_by_result_and_the_pair_gauges_hold_each_state() -> None:
    h, frontend, clock = await _serving_two_by_two()
    assert (pairs_gauge("passing"), pairs_gauge("failing"), pairs_gauge("drained")) == (4, 0, 0)
    serving = checks("pairs", "serving")
    clock.now += 10
    await h.reconcile()
    assert checks("pairs", "serving") == serving + 1
    frontend.behaviour = lambda p, d: "timeout" if (p, d) == ("m-prefill-a", "m-decode-a") else True
    clock.now += 10
    await h.reconcile()
    failing = checks("pairs", "failing")
    clock.now += 2
    await h.reconcile()  # the recheck confirms it: the round's verdict is False
    assert h.condition("Serving")["status"] == "False"
    assert checks("pairs", "failing") == failing + 1
    assert (pairs_gauge("passing"), pairs_gauge("failing")) == (3, 1)
    clock.now += 10
    await h.reconcile()  # drained by now: counted apart from the failing ones
    assert (pairs_gauge("passing"), pairs_gauge("failing"), pairs_gauge("drained")) == (3, 0, 1)
