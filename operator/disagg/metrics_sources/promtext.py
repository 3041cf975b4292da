"""One scrape of a vLLM /metrics page, reduced to what the scaler reads. Pure: text in, numbers out.

Parsing uses prometheus_client's own text-format parser. Every series of a metric is summed (vLLM labels series
by model and data-parallel engine), so a pod's value is the whole pod's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = (
    "vllm:request_success",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
)
GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_prefill_time_seconds",
)


@dataclass(frozen=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]
    """(upper bound, cumulative count), ascending, ending with +Inf."""
    total: float
    count: float


@dataclass(frozen=True)
class Scrape:
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)


def parse_scrape(text: str) -> Scrape:
    """Sum every series per metric. Raises ValueError when the text is not the Prometheus format."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.name in COUNTERS and name == f"{family.name}_total":
                counters[family.name] = counters.get(family.name, 0.0) + sample.value
            elif family.name in GAUGES and name == family.name:
                gauges[family.name] = gauges.get(family.name, 0.0) + sample.value
            elif family.name in HISTOGRAMS:
                if name == f"{family.name}_bucket":
                    bound = float(sample.labels["le"])
                    per = buckets.setdefault(family.name, {})
                    per[bound] = per.get(bound, 0.0) + sample.value
                elif name == f"{family.name}_sum":
                    sums[family.name] = sums.get(family.name, 0.0) + sample.value
                elif name == f"{family.name}_count":
                    counts[family.name] = counts.get(family.name, 0.0) + sample.value
    histograms = {
        name: Histogram(tuple(sorted(per.items())), sums.get(name, 0.0), counts.get(name, 0.0))
        for name, per in buckets.items()
    }
    return Scrape(counters, gauges, histograms)
