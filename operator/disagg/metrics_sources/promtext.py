"""One scrape of a vLLM /metrics page, reduced to what the scaler reads. Pure: text in, numbers out.

Parsing uses prometheus_client's own text-format parser. Every series of a metric is summed (vLLM labels series
by model and data-parallel engine), so a pod's value is the whole pod's; a few counters are kept apart by one label
(`vllm:prompt_tokens_by_source` by `source`).

What the counters mean in prefill/decode disaggregation (checked on a real vLLM NIXL pair, see
docs/autoscaling.md): decode's `vllm:prompt_tokens` and `request_prefill_time_seconds` count the prompt tokens that
arrived over the KV connector, not computed ones; decode's `prefix_cache_hits` stays 0 while
`external_prefix_cache_hits` rises; prefill answers one token per request and so never observes inter-token latency.
`vllm:prompt_tokens_by_source{source=local_compute|local_cache_hit|external_kv_transfer}` says where each prompt
token came from, so the computed work of a pool is its `local_compute` count.
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
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
)
LABELLED_COUNTERS = {"vllm:prompt_tokens_by_source": "source"}
"""Counters summed per value of one label: family -> label."""
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                  40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
"""vLLM's bucket bounds of vllm:time_to_first_token_seconds."""
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0)  # fmt: skip
"""vLLM's bucket bounds of vllm:inter_token_latency_seconds. A p90 that falls inside a bucket is a linear
interpolation (histogram_quantile), so between 25 and 50 ms it says little about where ITL really is: the policy
fits its decode model on the exact mean (sum / count) and reads the p90 only against its target."""
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
    labelled: dict[str, dict[str, float]] = field(default_factory=dict)
    """LABELLED_COUNTERS: family -> label value -> total (absent when the page has no such family)."""


def parse_scrape(text: str) -> Scrape:
    """Sum every series per metric. Raises ValueError when the text is not the Prometheus format."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    labelled: dict[str, dict[str, float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.name in COUNTERS and name == f"{family.name}_total":
                counters[family.name] = counters.get(family.name, 0.0) + sample.value
            elif family.name in LABELLED_COUNTERS and name == f"{family.name}_total":
                per_value = labelled.setdefault(family.name, {})
                value = sample.labels.get(LABELLED_COUNTERS[family.name], "")
                per_value[value] = per_value.get(value, 0.0) + sample.value
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
    return Scrape(counters, gauges, histograms, labelled)
