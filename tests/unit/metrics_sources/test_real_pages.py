"""The snapshot built from /metrics pages in vLLM's own exposition format, for a NIXL prefill/decode pair.

The pages in `pages/` have vLLM 0.33's metric names, HELP texts, label schema (`model_name`, `engine`,
`finished_reason`, `source`), bucket bounds and `_created` samples, as prometheus_client renders them; they were
assembled from vLLM's metric definitions, not captured from an engine. Two scrapes 15 s apart per pod. Over that
window the prefill pod took 30 prompts of 2000 tokens: 1200 computed, 500 from its own prefix cache and 300 loaded
by its KV connector from an external cache, in 3.0 s of prefill. The decode pod received 28 of those over NIXL (its
prompt tokens), computed about one token of each itself, and streamed 250 tokens per request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.metrics_sources.promtext import parse_scrape
from disagg.metrics_sources.window import PodSample, pool_snapshot
from disagg.scaling.policy import config_from_spec, decide
from disagg.scaling.snapshot import Observation, PoolSnapshot
from tests.unit.scaling.test_policy import make_spec

PAGES = Path(__file__).parent / "pages"


def snapshot(pool: str) -> PoolSnapshot:
    before = PodSample(f"{pool}-0", 100.0, parse_scrape((PAGES / f"{pool}-t0.txt").read_text()))
    after = PodSample(f"{pool}-0", 115.0, parse_scrape((PAGES / f"{pool}-t15.txt").read_text()))
    return pool_snapshot(pool, 115.0, [(after, before)], ready=1, starting=0, unanswered=[])  # type: ignore[arg-type]


def test_the_per_source_counter_is_read_per_source() -> None:
    scrape = parse_scrape((PAGES / "prefill-t15.txt").read_text())
    assert scrape.labelled["vllm:prompt_tokens_by_source"] == {
        "local_compute": 1200 * 630,
        "local_cache_hit": 500 * 630,
        "external_kv_transfer": 300 * 630,
    }
    assert scrape.counters["vllm:prompt_tokens"] == 2000 * 630  # all sources together


def test_prefill_work_is_the_tokens_it_computed() -> None:
    prefill = snapshot("prefill")
    assert prefill.prompt_token_rate == pytest.approx(60_000 / 15)
    assert prefill.computed_prompt_token_rate == pytest.approx(36_000 / 15)
    # The local prefix-cache hit rate alone (25%) misses the 9000 tokens the connector loaded from outside.
    assert prefill.prefix_hit_rate == pytest.approx(0.25)
    assert prefill.uncached_prompt_token_rate == pytest.approx(2400.0)
    assert prefill.uncached_share == pytest.approx(0.6)
    # Capacity: computed tokens per busy second, not every prompt token (20000 tok/s would be 67% too high).
    assert prefill.prefill_tokens_per_busy_s == pytest.approx(36_000 / 3.0)


def test_prefill_reports_time_to_first_token_but_never_inter_token_latency() -> None:
    prefill = snapshot("prefill")
    assert prefill.ttft_p90_s == pytest.approx(0.25 + 0.25 * (27 - 15) / 15)  # inside vLLM's 0.25-0.5 s bucket
    assert prefill.itl_p90_s is None and prefill.itl_mean_s is None


def test_decode_prompt_tokens_arrived_over_nixl_and_are_not_capacity() -> None:
    decode = snapshot("decode")
    assert decode.prompt_token_rate == pytest.approx(2000 * 28 / 15)
    assert decode.transferred_prompt_token_rate == pytest.approx(1999 * 28 / 15)
    assert decode.computed_prompt_token_rate == pytest.approx(28 / 15)
    assert decode.prefix_hit_rate == 0.0  # its own cache never hits; the connector's does
    assert decode.prefill_tokens_per_busy_s is None  # its "prefill time" is the transfer
    assert decode.generation_token_rate == pytest.approx(250 * 28 / 15)


def test_decode_itl_mean_is_exact_where_the_p90_is_a_bucket_interpolation() -> None:
    decode = snapshot("decode")
    # Per request: 100 gaps of 21 ms, 140 of 32 ms, 9 of 61 ms. The true p90 is 32 ms; vLLM's buckets put all the
    # 32 ms gaps between 25 and 50 ms, so histogram_quantile says 47 ms.
    assert decode.itl_mean_s == pytest.approx((100 * 0.021 + 140 * 0.032 + 9 * 0.061) / 249)
    assert decode.itl_p90_s == pytest.approx(0.025 + 0.025 * (0.9 * 249 - 100) / 140)


def test_the_policy_sizes_prefill_on_the_computed_tokens_of_real_pages() -> None:
    config = config_from_spec(make_spec())
    decision = decide(config, Observation(snapshot("prefill"), snapshot("decode")), None, 115.0)
    assert decision.prefill is not None and decision.prefill.hold is None
    assert "prefill 2400 tok/s" in decision.prefill.reason
    assert "capacity 12000 tok/s/replica" in decision.prefill.reason
