"""Typed per-pool metrics snapshots: what a metrics source hands to the scaling policy.

The policy never sees where numbers came from. The shell fills these from direct scraping of each engine pod's
vLLM /metrics or from Prometheus; the benchmark fills them from the simulator's telemetry. Every rate and latency
covers the same window (`window_s`) ending at `taken_at`. A value is `None` when the source could not compute it
(for example a histogram with no samples in the window); the policy then falls back or holds, never guesses zero.

vLLM metric each field is meant to come from (window = the scrape interval, rates are increase()/window):

| field | vLLM metric |
| --- | --- |
| request_rate | vllm:request_success_total (prefill pool: requests admitted to prefill) |
| prompt_token_rate | vllm:prompt_tokens_total |
| generation_token_rate | vllm:generation_tokens_total |
| computed_prompt_token_rate | vllm:prompt_tokens_by_source_total{source="local_compute"} |
| transferred_prompt_token_rate | vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} |
| prefix_hit_rate | vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total |
| waiting_requests, running_requests | vllm:num_requests_waiting, vllm:num_requests_running (summed over replicas) |
| kv_cache_usage | vllm:kv_cache_usage_perc (mean over ready replicas, 0..1) |
| ttft_p90_s, itl_p90_s | histogram_quantile(0.9) of vllm:time_to_first_token_seconds, inter_token_latency_seconds |
| itl_mean_s | vllm:inter_token_latency_seconds_sum / _count |
| ttft_histogram, itl_histogram | the window's increase of each bucket of those two histograms |
| prompt_tokens_p90 | histogram_quantile(0.9) of vllm:request_prompt_tokens |
| prefill_tokens_per_busy_s | computed (else all) prompt tokens / vllm:request_prefill_time_seconds_sum, per replica |

In P/D a decode pod's prompt tokens arrived over the KV connector (`external_kv_transfer`): they are not work, and
its "prefill time" is the transfer. A prefill pod's work is its `local_compute` tokens. Engines without the
per-source counter leave the computed rate None, and the policy falls back to prompt tokens x (1 - prefix hit rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from disagg.api.pool import PoolName

Histogram = tuple[tuple[float, float], ...]
"""Cumulative bucket counts: (upper bound, observations at or below it), ascending, ending with +Inf."""


def share_above(histogram: Histogram | None, threshold: float) -> float | None:
    """Share of a histogram's observations above `threshold`, interpolating linearly inside the bucket that holds it
    (as PromQL's histogram_quantile does): exact when the threshold is a bucket bound. None without observations."""
    if not histogram or histogram[-1][1] <= 0:
        return None
    total = histogram[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in histogram:
        if threshold <= bound:
            if math.isinf(bound):
                return (total - lower_count) / total
            inside = lower_count + (count - lower_count) * (threshold - lower_bound) / (bound - lower_bound)
            return max(total - inside, 0.0) / total
        lower_bound, lower_count = bound, count
    return 0.0


class MetricsHealth(StrEnum):
    """Whether a snapshot can be trusted. Anything but OK makes the policy hold the pool."""

    OK = "OK"
    MISSING = "Missing"
    """No metrics at all for the pool (scrape failed, Prometheus down, no series)."""
    STALE = "Stale"
    """The newest sample is older than the source's staleness bound."""
    PARTIAL = "Partial"
    """Some ready replicas did not answer; totals would undercount the load."""


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """One pool's load and latency over one window, summed or averaged over its ready replicas."""

    pool: PoolName
    taken_at: float
    """End of the window, in the same clock the policy's `now` uses (seconds)."""
    window_s: float
    ready_replicas: int
    """Replicas serving traffic now. Load and latency below come from these only."""
    starting_replicas: int = 0
    """Replicas created but not ready yet (pulling, loading weights): capacity that is coming."""
    request_rate: float | None = None
    """Requests per second entering the pool."""
    prompt_token_rate: float | None = None
    """Prompt tokens per second entering the pool, cached or not."""
    generation_token_rate: float | None = None
    """Output tokens per second produced by the pool."""
    computed_prompt_token_rate: float | None = None
    """Prompt tokens per second the pool computed itself (vLLM's `local_compute` source); None when not reported."""
    transferred_prompt_token_rate: float | None = None
    """Prompt tokens per second that arrived over the KV connector (`external_kv_transfer`): decode's share in P/D."""
    prefix_hit_rate: float | None = None
    """Share of prompt tokens served from the prefix cache (0..1)."""
    waiting_requests: float | None = None
    """Queued requests summed over replicas, averaged over the window."""
    running_requests: float | None = None
    """Requests in the running batch summed over replicas, averaged over the window."""
    kv_cache_usage: float | None = None
    """Mean share of KV cache blocks in use per ready replica (0..1)."""
    ttft_p90_s: float | None = None
    """90th percentile time to first token over the window."""
    itl_p90_s: float | None = None
    """90th percentile inter-token latency over the window."""
    itl_mean_s: float | None = None
    """Mean inter-token latency over the window, exact (histogram sum / count) where the p90 is interpolated."""
    ttft_histogram: Histogram | None = None
    """The window's TTFT observations per bucket, cumulative: (upper bound in s, count), ascending, +Inf last."""
    itl_histogram: Histogram | None = None
    """The same for inter-token latency (token-level: one observation per output token after the first)."""
    prompt_tokens_p90: float | None = None
    """90th percentile prompt length over the window: sets the p90 prefill time."""
    prefill_tokens_per_busy_s: float | None = None
    """Prompt tokens one replica computes per second while busy: the measured prefill capacity."""
    health: MetricsHealth = MetricsHealth.OK
    health_reason: str = ""
    """Human-readable detail when health is not OK, e.g. "2 of 3 pods did not answer"."""

    @property
    def usable(self) -> bool:
        return self.health is MetricsHealth.OK and self.window_s > 0

    @property
    def mean_prompt_tokens(self) -> float | None:
        if self.request_rate is None or self.prompt_token_rate is None or self.request_rate <= 0:
            return None
        return self.prompt_token_rate / self.request_rate

    @property
    def uncached_share(self) -> float:
        """Share of prompt tokens the pool computes: from the per-source counter when reported, else 1 - hit rate."""
        if self.computed_prompt_token_rate is not None and self.prompt_token_rate:
            return min(max(self.computed_prompt_token_rate / self.prompt_token_rate, 0.0), 1.0)
        return 1.0 - min(max(self.prefix_hit_rate or 0.0, 0.0), 1.0)

    @property
    def uncached_prompt_token_rate(self) -> float | None:
        """Prompt tokens per second that must actually be computed: the prefill pool's real work."""
        if self.computed_prompt_token_rate is not None:
            return self.computed_prompt_token_rate
        if self.prompt_token_rate is None:
            return None
        return self.prompt_token_rate * self.uncached_share


@dataclass(frozen=True, slots=True)
class Observation:
    """Both pools observed at one evaluation. A pool the source could not reach is still present, marked MISSING."""

    prefill: PoolSnapshot
    decode: PoolSnapshot

    def pool(self, name: PoolName) -> PoolSnapshot:
        return self.prefill if name == "prefill" else self.decode


def missing(pool: PoolName, taken_at: float, reason: str, ready: int = 0, starting: int = 0) -> PoolSnapshot:
    """A snapshot that says only "nothing usable": the source failed for this pool."""
    return PoolSnapshot(
        pool=pool,
        taken_at=taken_at,
        window_s=0.0,
        ready_replicas=ready,
        starting_replicas=starting,
        health=MetricsHealth.MISSING,
        health_reason=reason,
    )
