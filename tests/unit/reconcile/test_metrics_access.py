"""The scaler reaches only the Prometheus the install allows, follows no redirect, and never puts what an endpoint
answered into status (D76). Regression tests: before, any URL in a spec was fetched (an internal service, the
cloud metadata endpoint...) and the answer's `error` text or unparsable values were echoed into ScalingActive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from disagg.api.validate import validate_deployment
from disagg.plan import build_plan
from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.kube import Kube
from disagg.reconcile.metrics_access import normalized, prometheus_allowed
from tests.support.fake_kube import FakeApiServer

SECRET = "s3cr3t-token-from-the-metadata-service"


@dataclass
class Endpoint:
    """A local HTTP server that records what it was asked and answers with `answer`."""

    answer: Callable[[web.Request], web.StreamResponse]
    requests: list[str] = field(default_factory=list)
    url: str = ""


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Callable[[web.Request], web.StreamResponse]], Any]]:
    runners: list[web.AppRunner] = []

    async def start(answer: Callable[[web.Request], web.StreamResponse]) -> Endpoint:
        endpoint = Endpoint(answer)

        async def handle(request: web.Request) -> web.StreamResponse:
            endpoint.requests.append(request.path_qs)
            return endpoint.answer(request)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        endpoint.url = f"http://127.0.0.1:{port}"
        return endpoint

    yield start
    for runner in runners:
        await runner.cleanup()


def _spec_and_plan(url: str) -> tuple[Any, Any]:
    document = {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "model": {"name": "org/model"},
            "decode": {"autoscaling": {"enabled": True, "maxReplicas": 4}},
            "scaling": {"metrics": {"source": "prometheus", "prometheus": {"url": url}}, "slo": {"itlP90": "50ms"}},
        },
    }
    result = validate_deployment(document)
    assert result.deployment is not None, result.problems
    return result.deployment.spec, build_plan(result.deployment, "ns")


async def _step(url: str, allowed: tuple[str, ...]) -> str:
    spec, plan = _spec_and_plan(url)
    kube = Kube(FakeApiServer(namespaces=("ns",)))
    autoscaler = Autoscaler(kube, wall_clock=lambda: 1000.0, allowed_prometheus=allowed)
    try:
        report = await autoscaler.step(("ns", "m"), spec, plan, {}, [], "2026-01-01T00:00:00Z")
    finally:
        await autoscaler.close()
    assert report.condition is not None
    return f"{report.condition.status} {report.condition.reason}: {report.condition.message}"


async def test_a_url_the_install_does_not_allow_is_never_contacted(serve: Any) -> None:
    internal = await serve(lambda _: web.Response(text=SECRET))
    condition = await _step(internal.url, allowed=("http://prometheus.monitoring:9090",))
    assert internal.requests == []
    assert condition.startswith("False MetricsSourceNotAllowed")
    assert "http://prometheus.monitoring:9090" in condition and "--prometheus-url" in condition


async def test_without_an_allowed_prometheus_the_source_is_refused(serve: Any) -> None:
    internal = await serve(lambda _: web.Response(text=SECRET))
    condition = await _step(internal.url, allowed=())
    assert internal.requests == [] and "allowed: none" in condition


@pytest.mark.parametrize(
    "answer",
    [
        lambda _: web.json_response({"status": "error", "errorType": "bad_data", "error": SECRET}),
        lambda _: web.json_response({"status": "success", "data": {"result": [{"value": [0, SECRET]}]}}),
        lambda _: web.json_response({"status": "success", "data": {"result": [SECRET]}}),
        lambda _: web.json_response([SECRET]),
        lambda _: web.Response(text=SECRET),
        lambda _: web.Response(status=500, reason="Internal", text=SECRET),
    ],
    ids=["error-field", "value-not-a-number", "malformed-result", "not-an-object", "not-json", "http-500"],
)
async def test_what_an_allowed_prometheus_answers_never_reaches_status(serve: Any, answer: Any) -> None:
    prometheus = await serve(answer)
    condition = await _step(prometheus.url, allowed=(prometheus.url,))
    assert prometheus.requests, "the allowed Prometheus is queried"
    assert SECRET not in condition
    assert f"Prometheus at {prometheus.url}" in condition


async def test_redirects_are_not_followed(serve: Any) -> None:
    elsewhere = await serve(lambda _: web.Response(text=SECRET))
    prometheus = await serve(lambda _: web.Response(status=302, headers={"Location": f"{elsewhere.url}/x"}))
    condition = await _step(prometheus.url, allowed=(f"{prometheus.url}/",))
    assert prometheus.requests and elsewhere.requests == []
    assert "answered HTTP 302" in condition and SECRET not in condition


@pytest.mark.parametrize(
    ("url", "allowed", "expected"),
    [
        ("http://prometheus.monitoring:9090", ("http://prometheus.monitoring:9090/",), True),
        ("HTTP://Prometheus.Monitoring:9090/", ("http://prometheus.monitoring:9090",), True),
        ("http://prometheus.monitoring:9090/prom", ("http://prometheus.monitoring:9090/prom",), True),
        ("http://prometheus.monitoring:9090/other", ("http://prometheus.monitoring:9090",), False),
        ("http://prometheus.monitoring:9091", ("http://prometheus.monitoring:9090",), False),
        ("http://user:pw@prometheus.monitoring:9090", ("http://user:pw@prometheus.monitoring:9090",), False),
        ("http://prometheus.monitoring:9090?x=1", ("http://prometheus.monitoring:9090",), False),
        ("http://169.254.169.254", (), False),
    ],
)
def test_only_the_configured_base_urls_are_allowed(url: str, allowed: tuple[str, ...], expected: bool) -> None:
    assert prometheus_allowed(url, allowed) is expected


def test_normalized_drops_what_does_not_name_the_server() -> None:
    assert normalized(" https://Prom.example:443/api/ ") == "https://prom.example:443/api"
