"""Two scrapes of a pool's pods -> one PoolSnapshot over the window between them. Pure.

Rates are counter increases over the window; percentiles come from the increase of each histogram bucket, summed
over pods, and interpolated inside the bucket the way PromQL's histogram_quantile does.
"""

from __future__ import annotations

from dataclasses import dataclass

from disagg.api.pool import PoolName
from disagg.scaling.snapshot import MetricsHealth, PoolSnapshot, missing

from .promtext import Histogram, Scrape


@dataclass(frozen=True)
class PodSample:
    pod: str
    at: float
    scrape: Scrape


def histogram_quantile(quantile: float, buckets: list[tuple[float, float]]) -> float | None:
    """The quantile of a cumulative bucket list (ascending bounds, +Inf last); None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = quantile * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound  # PromQL answers the highest finite bound here
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _delta_buckets(current: Histogram, previous: Histogram | None) -> dict[float, float]:
    before = dict(previous.buckets) if previous else {}
    delta = {}
    for bound, count in current.buckets:
        change = count - before.get(bound, 0.0)
        delta[bound] = change if change >= 0 else count  # a restarted pod's counters start again from zero
    return delta


def _increase(current: float, previous: float | None) -> float:
    if previous is None:
        return 0.0
    return current - previous if current >= previous else current


def pool_snapshot(
    pool: PoolName,
    taken_at: float,
    samples: list[tuple[PodSample, PodSample | None]],
    ready: int,
    starting: int,
    unanswered: list[str],
) -> PoolSnapshot:
    """Combine the pool's pods. `samples` pairs each answering pod's current scrape with its previous one."""
    if not samples:
        reason = f"no metrics from any ready {pool} pod" + (f" ({', '.join(unanswered)})" if unanswered else "")
        return missing(pool, taken_at, reason, ready, starting)
    paired = [(current, previous) for current, previous in samples if previous is not None]
    if not paired:
        return missing(pool, taken_at, "first scrape: rates need two samples", ready, starting)
    window = sum(current.at - previous.at for current, previous in paired) / len(paired)

    def rate(counter: str) -> float:
        return (
            sum(
                _increase(current.scrape.counters.get(counter, 0.0), previous.scrape.counters.get(counter))
                for current, previous in paired
            )
            / window
        )

    def gauge_sum(name: str) -> float | None:
        values = [current.scrape.gauges[name] for current, _ in samples if name in current.scrape.gauges]
        return sum(values) if values else None

    def window_buckets(name: str) -> tuple[tuple[float, float], ...]:
        merged: dict[float, float] = {}
        for current, previous in paired:
            histogram = current.scrape.histograms.get(name)
            if histogram is None:
                continue
            for bound, change in _delta_buckets(histogram, previous.scrape.histograms.get(name)).items():
                merged[bound] = merged.get(bound, 0.0) + change
        return tuple(sorted(merged.items()))

    def quantile(name: str, q: float = 0.9) -> float | None:
        return histogram_quantile(q, list(window_buckets(name)))

    def observed(name: str) -> tuple[tuple[float, float], ...] | None:
        buckets = window_buckets(name)
        return buckets if buckets and buckets[-1][1] > 0 else None

    def labelled_rate(family: str, value: str) -> float | None:
        """None when no answering pod reports the family at all (an engine too old for it)."""
        reported = [(c, p) for c, p in paired if family in c.scrape.labelled]
        if not reported:
            return None
        return (
            sum(
                _increase(c.scrape.labelled[family].get(value, 0.0), p.scrape.labelled.get(family, {}).get(value))
                for c, p in reported
            )
            / window
        )

    def hist_count_increase(name: str) -> float:
        total = 0.0
        for current, previous in paired:
            histogram = current.scrape.histograms.get(name)
            if histogram is not None:
                before = previous.scrape.histograms.get(name)
                total += _increase(histogram.count, before.count if before else None)
        return total

    def hist_sum_increase(name: str) -> float:
        total = 0.0
        for current, previous in paired:
            histogram = current.scrape.histograms.get(name)
            if histogram is not None:
                before = previous.scrape.histograms.get(name)
                total += _increase(histogram.total, before.total if before else None)
        return total

    queries = rate("vllm:prefix_cache_queries")
    prompt_rate = rate("vllm:prompt_tokens")
    computed = labelled_rate("vllm:prompt_tokens_by_source", "local_compute")
    busy = hist_sum_increase("vllm:request_prefill_time_seconds")
    # Capacity from the tokens the pool computed: cached tokens cost nothing, and a decode pod's "prefill" is the
    # KV transfer (its prompt tokens are all external_kv_transfer, so its capacity stays unknown, as it should).
    work = computed if computed is not None else prompt_rate
    itl_count = hist_count_increase("vllm:inter_token_latency_seconds")
    usage = [
        current.scrape.gauges["vllm:kv_cache_usage_perc"]
        for current, _ in samples
        if "vllm:kv_cache_usage_perc" in current.scrape.gauges
    ]
    health = MetricsHealth.PARTIAL if unanswered else MetricsHealth.OK
    return PoolSnapshot(
        pool=pool,
        taken_at=taken_at,
        window_s=window,
        ready_replicas=ready,
        starting_replicas=starting,
        request_rate=rate("vllm:request_success"),
        prompt_token_rate=prompt_rate,
        generation_token_rate=rate("vllm:generation_tokens"),
        computed_prompt_token_rate=computed,
        transferred_prompt_token_rate=labelled_rate("vllm:prompt_tokens_by_source", "external_kv_transfer"),
        prefix_hit_rate=(rate("vllm:prefix_cache_hits") / queries) if queries > 0 else None,
        waiting_requests=gauge_sum("vllm:num_requests_waiting"),
        running_requests=gauge_sum("vllm:num_requests_running"),
        kv_cache_usage=(sum(usage) / len(usage)) if usage else None,
        ttft_p90_s=quantile("vllm:time_to_first_token_seconds"),
        itl_p90_s=quantile("vllm:inter_token_latency_seconds"),
        itl_mean_s=hist_sum_increase("vllm:inter_token_latency_seconds") / itl_count if itl_count > 0 else None,
        ttft_histogram=observed("vllm:time_to_first_token_seconds"),
        itl_histogram=observed("vllm:inter_token_latency_seconds"),
        prompt_tokens_p90=quantile("vllm:request_prompt_tokens"),
        prefill_tokens_per_busy_s=(work * window / busy) if pool == "prefill" and busy > 0 and work > 0 else None,
        health=health,
        health_reason=f"{len(unanswered)} of {ready} ready pods did not answer: {', '.join(unanswered)}"
        if unanswered
        else "",
    )
