"""Read the same numbers from Prometheus with PromQL over the scaling interval."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from disagg.api.pool import PoolName
from disagg.scaling.snapshot import MetricsHealth, Observation, PoolSnapshot, missing

from .pods import pool_pods

QUERY_TIMEOUT_S = 5.0


def pool_selector(namespace: str, name: str, pool: PoolName) -> str:
    """Series of one pool, by the `namespace` and `pod` target labels every Kubernetes scrape config sets."""
    return f'namespace="{namespace}",pod=~"{name}-{pool}-.+"'


def pool_queries(selector: str, window: str) -> dict[str, str]:
    rate = f"[{window}]"
    computed = f'sum(rate(vllm:prompt_tokens_by_source_total{{{selector},source="local_compute"}}{rate}))'
    return {
        "request_rate": f"sum(rate(vllm:request_success_total{{{selector}}}{rate}))",
        "prompt_token_rate": f"sum(rate(vllm:prompt_tokens_total{{{selector}}}{rate}))",
        "generation_token_rate": f"sum(rate(vllm:generation_tokens_total{{{selector}}}{rate}))",
        "computed_prompt_token_rate": computed,
        "transferred_prompt_token_rate": f"sum(rate(vllm:prompt_tokens_by_source_total"
        f'{{{selector},source="external_kv_transfer"}}{rate}))',
        "prefix_hit_rate": f"sum(rate(vllm:prefix_cache_hits_total{{{selector}}}{rate})) / "
        f"sum(rate(vllm:prefix_cache_queries_total{{{selector}}}{rate}))",
        "waiting_requests": f"sum(vllm:num_requests_waiting{{{selector}}})",
        "running_requests": f"sum(vllm:num_requests_running{{{selector}}})",
        "kv_cache_usage": f"avg(vllm:kv_cache_usage_perc{{{selector}}})",
        "ttft_p90_s": f"histogram_quantile(0.9, sum by (le) "
        f"(rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}{rate})))",
        "itl_p90_s": f"histogram_quantile(0.9, sum by (le) "
        f"(rate(vllm:inter_token_latency_seconds_bucket{{{selector}}}{rate})))",
        "itl_mean_s": f"sum(rate(vllm:inter_token_latency_seconds_sum{{{selector}}}{rate})) / "
        f"sum(rate(vllm:inter_token_latency_seconds_count{{{selector}}}{rate}))",
        "prompt_tokens_p90": f"histogram_quantile(0.9, sum by (le) "
        f"(rate(vllm:request_prompt_tokens_bucket{{{selector}}}{rate})))",
        # Computed tokens where the engine reports them by source (`or` keeps the left side when it has a value).
        "prefill_tokens_per_busy_s": f"({computed} or sum(rate(vllm:prompt_tokens_total{{{selector}}}{rate}))) / "
        f"sum(rate(vllm:request_prefill_time_seconds_sum{{{selector}}}{rate}))",
    }


def bucket_queries(selector: str, window: str) -> dict[str, str]:
    """The window's increase of every bucket, one series per `le`."""
    return {
        field: f"sum by (le) (increase({metric}_bucket{{{selector}}}[{window}]))"
        for field, metric in (
            ("ttft_histogram", "vllm:time_to_first_token_seconds"),
            ("itl_histogram", "vllm:inter_token_latency_seconds"),
        )
    }


def buckets_of(payload: dict[str, Any]) -> tuple[tuple[float, float], ...] | None:
    """A `sum by (le)` vector as a cumulative bucket list; None when empty or without observations."""
    results = (payload.get("data") or {}).get("result") or []
    buckets = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in results if "le" in r.get("metric", {}))
    if not buckets or buckets[-1][1] <= 0 or buckets[-1][1] != buckets[-1][1]:
        return None
    return tuple(buckets)


def _scalar(payload: dict[str, Any]) -> float | None:
    results = (payload.get("data") or {}).get("result") or []
    if not results:
        return None
    value = float(results[0]["value"][1])
    return None if value != value or value in (float("inf"), float("-inf")) else value  # NaN/Inf: no data


class _Unusable(Exception):
    """An answer that gives no value, described without its content."""


def _failure(exc: BaseException) -> str:
    if isinstance(exc, _Unusable):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    if isinstance(exc, aiohttp.ClientConnectionError):
        return "could not be reached"
    if isinstance(exc, ValueError):  # the body is not JSON
        return "answered something that is not JSON"
    return f"failed ({type(exc).__name__})"


class PrometheusSource:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def forget(self, namespace: str, name: str) -> None:
        """Nothing to drop: every evaluation queries Prometheus afresh."""

    async def _payload(self, expression: str) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=QUERY_TIMEOUT_S))
        # No redirects: the install allows this URL (D76), not wherever its answer points.
        query = {"query": expression}
        async with self._session.get(f"{self.url}/api/v1/query", params=query, allow_redirects=False) as response:
            if response.status != 200:
                raise _Unusable(f"answered HTTP {response.status}")
            payload = await response.json(content_type=None)
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise _Unusable("answered a failed query")
        return payload

    async def _query(self, expression: str) -> float | None:
        try:
            return _scalar(await self._payload(expression))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            raise _Unusable("answered something that is not a Prometheus query result") from None

    async def _buckets(self, expression: str) -> tuple[tuple[float, float], ...] | None:
        try:
            return buckets_of(await self._payload(expression))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            raise _Unusable("answered something that is not a Prometheus query result") from None

    async def observe(
        self, namespace: str, name: str, pods: list[dict[str, Any]], now: float, window_s: float
    ) -> Observation:
        window = f"{max(int(window_s), 1)}s"
        prefill, decode = await asyncio.gather(
            self._pool(namespace, name, "prefill", pods, now, window),
            self._pool(namespace, name, "decode", pods, now, window),
        )
        return Observation(prefill=prefill, decode=decode)

    async def _pool(
        self, namespace: str, name: str, pool: PoolName, pods: list[dict[str, Any]], now: float, window: str
    ) -> PoolSnapshot:
        members = pool_pods(pods, pool)
        queries = pool_queries(pool_selector(namespace, name, pool), window)
        histograms = bucket_queries(pool_selector(namespace, name, pool), window)
        try:
            values = await asyncio.gather(*(self._query(expression) for expression in queries.values()))
            buckets = await asyncio.gather(*(self._buckets(expression) for expression in histograms.values()))
        except Exception as exc:  # described in our words: status never echoes what the endpoint sent (D76)
            return missing(pool, now, f"Prometheus at {self.url} {_failure(exc)}", len(members.ready), members.starting)
        fields = dict(zip(queries, values, strict=True))
        observed = dict(zip(histograms, buckets, strict=True))
        if fields["request_rate"] is None and fields["running_requests"] is None:
            return missing(
                pool, now, f"Prometheus has no vLLM series for {pool} pods", len(members.ready), members.starting
            )
        return PoolSnapshot(
            pool=pool,
            taken_at=now,
            window_s=float(window.rstrip("s")),
            ready_replicas=len(members.ready),
            starting_replicas=members.starting,
            request_rate=fields["request_rate"],
            prompt_token_rate=fields["prompt_token_rate"],
            generation_token_rate=fields["generation_token_rate"],
            computed_prompt_token_rate=fields["computed_prompt_token_rate"],
            transferred_prompt_token_rate=fields["transferred_prompt_token_rate"],
            prefix_hit_rate=fields["prefix_hit_rate"],
            waiting_requests=fields["waiting_requests"],
            running_requests=fields["running_requests"],
            kv_cache_usage=fields["kv_cache_usage"],
            ttft_p90_s=fields["ttft_p90_s"],
            itl_p90_s=fields["itl_p90_s"],
            itl_mean_s=fields["itl_mean_s"],
            ttft_histogram=observed["ttft_histogram"],
            itl_histogram=observed["itl_histogram"],
            prompt_tokens_p90=fields["prompt_tokens_p90"],
            prefill_tokens_per_busy_s=fields["prefill_tokens_per_busy_s"] if pool == "prefill" else None,
            health=MetricsHealth.OK,
        )
