"""Turning vLLM /metrics scrapes into windowed rates and percentiles, as the direct source does."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from disagg.metrics_sources.pods import pool_pods
from disagg.metrics_sources.promtext import parse_scrape
from disagg.metrics_sources.window import PodSample, histogram_quantile, pool_snapshot
from disagg.scaling.snapshot import MetricsHealth


def page(
    success: float, prompt: float, waiting: float, kv: float, ttft_buckets: list[tuple[str, float]], engines: int = 1
) -> str:
    """A /metrics page produced the way vLLM produces it: prometheus_client metrics, one series per engine."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    counter = Counter("vllm:request_success", "", [*labels, "finished_reason"], registry=registry)
    prompt_tokens = Counter("vllm:prompt_tokens", "", labels, registry=registry)
    waiting_gauge = Gauge("vllm:num_requests_waiting", "", labels, registry=registry)
    kv_gauge = Gauge("vllm:kv_cache_usage_perc", "", labels, registry=registry)
    bounds = [float(bound) for bound, _ in ttft_buckets if bound != "+Inf"]
    ttft = Histogram("vllm:time_to_first_token_seconds", "", labels, buckets=bounds, registry=registry)
    for engine in map(str, range(engines)):
        counter.labels("m", engine, "stop").inc(success / engines)
        prompt_tokens.labels("m", engine).inc(prompt / engines)
        waiting_gauge.labels("m", engine).set(waiting / engines)
        kv_gauge.labels("m", engine).set(kv)
        previous = 0.0
        for bound, cumulative in ttft_buckets:  # observe just inside each bucket to reach the cumulative counts
            value = float(bound) * 0.99 if bound != "+Inf" else bounds[-1] * 10
            for _ in range(round((cumulative - previous) / engines)):
                ttft.labels("m", engine).observe(value)
            previous = cumulative
    return generate_latest(registry).decode()


def test_every_series_of_a_metric_is_summed() -> None:
    scrape = parse_scrape(page(100, 5000, 4, 0.5, [("0.1", 10), ("1.0", 90), ("+Inf", 100)], engines=2))
    assert scrape.counters["vllm:request_success"] == 100
    assert scrape.gauges["vllm:num_requests_waiting"] == 4
    assert scrape.histograms["vllm:time_to_first_token_seconds"].buckets[-1] == (float("inf"), 100)


def test_histogram_quantile_interpolates_like_promql() -> None:
    buckets = [(0.1, 10.0), (1.0, 90.0), (float("inf"), 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.9 * (50 - 10) / 80)
    assert histogram_quantile(0.95, buckets) == 1.0  # in the +Inf bucket: the highest finite bound
    assert histogram_quantile(0.9, [(1.0, 0.0), (float("inf"), 0.0)]) is None


def test_rates_and_percentiles_come_from_the_window_not_from_the_lifetime() -> None:
    before = PodSample(
        "p", 100.0, parse_scrape(page(1000, 50_000, 2, 0.3, [("0.1", 900), ("1.0", 990), ("+Inf", 1000)]))
    )
    # In the last 10 s: 20 requests, 2000 prompt tokens, all 20 first tokens slower than 0.1 s.
    after = PodSample(
        "p", 110.0, parse_scrape(page(1020, 52_000, 6, 0.7, [("0.1", 900), ("1.0", 1010), ("+Inf", 1020)]))
    )
    snapshot = pool_snapshot("prefill", 110.0, [(after, before)], ready=1, starting=0, unanswered=[])
    assert snapshot.health is MetricsHealth.OK and snapshot.window_s == 10.0
    assert snapshot.request_rate == pytest.approx(2.0)
    assert snapshot.prompt_token_rate == pytest.approx(200.0)
    assert snapshot.waiting_requests == 6 and snapshot.kv_cache_usage == pytest.approx(0.7)
    assert snapshot.ttft_p90_s is not None and 0.1 < snapshot.ttft_p90_s <= 1.0  # lifetime p90 would be <= 0.1


def test_a_restarted_pod_counts_from_zero_instead_of_going_negative() -> None:
    before = PodSample("p", 0.0, parse_scrape(page(500, 9000, 0, 0.1, [("1.0", 500), ("+Inf", 500)])))
    after = PodSample("p", 10.0, parse_scrape(page(30, 600, 0, 0.1, [("1.0", 30), ("+Inf", 30)])))
    snapshot = pool_snapshot("decode", 10.0, [(after, before)], ready=1, starting=0, unanswered=[])
    assert snapshot.request_rate == pytest.approx(3.0)


def test_first_scrape_and_missing_pods_are_not_trusted() -> None:
    only = PodSample("p", 0.0, parse_scrape(page(1, 1, 0, 0.1, [("1.0", 1), ("+Inf", 1)])))
    first = pool_snapshot("decode", 0.0, [(only, None)], ready=1, starting=0, unanswered=[])
    assert first.health is MetricsHealth.MISSING and "two samples" in first.health_reason
    nobody = pool_snapshot("decode", 5.0, [], ready=2, starting=1, unanswered=["a", "b"])
    assert nobody.health is MetricsHealth.MISSING and nobody.ready_replicas == 2 and nobody.starting_replicas == 1
    later = PodSample("p", 10.0, parse_scrape(page(2, 2, 0, 0.1, [("1.0", 2), ("+Inf", 2)])))
    partial = pool_snapshot("decode", 10.0, [(later, only)], ready=2, starting=0, unanswered=["b"])
    assert partial.health is MetricsHealth.PARTIAL and "b" in partial.health_reason


def test_pool_pods_counts_ready_api_pods_and_starting_ones() -> None:
    def pod(name: str, role: str, ready: bool, index: str | None = None, ip: str | None = "10.0.0.1") -> dict:
        labels = {"disagg.dev/role": role}
        if index is not None:
            labels["leaderworkerset.sigs.k8s.io/worker-index"] = index
        return {
            "metadata": {"name": name, "labels": labels},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    pods = [
        pod("d-0", "decode", True, "0"),
        pod("d-0-1", "decode", True, "1"),
        pod("d-1", "decode", False, "0"),
        pod("p-a", "prefill", True),
        pod("p-b", "prefill", True, ip=None),
    ]
    decode = pool_pods(pods, "decode")
    assert decode.ready == [("d-0", "10.0.0.1")] and decode.starting == 1  # workers serve no metrics
    prefill = pool_pods(pods, "prefill")
    assert prefill.ready == [("p-a", "10.0.0.1")] and prefill.starting == 1
