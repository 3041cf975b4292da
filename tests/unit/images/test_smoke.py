"""The engine smoke run's pure parts: how engines are started and how their metrics and memory are read."""

from __future__ import annotations

import json

import pytest
from e2e.images.smoke import Engine, kv_transfer_config, metric, parse_mem_usage, parse_metrics, run_argv


def env_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--env")


def test_a_plain_engine_serves_the_tiny_model_with_dummy_weights_on_the_host_network() -> None:
    argv = run_argv("img:1", Engine("e", 8123))
    assert argv[argv.index("--network") + 1] == "host"
    at = argv.index("img:1")
    assert argv[at + 1 : at + 5] == ["serve", "/opt/models/tiny-qwen3", "--load-format", "dummy"]
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert env_of(argv)["VLLM_CPU_KVCACHE_SPACE"] == "1"  # vLLM CPU takes whole GiB only
    assert "--kv-transfer-config" not in argv
    assert not {"VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_CPU_OMP_THREADS_BIND"} & set(env_of(argv))


def test_a_pair_member_gets_its_role_cpu_buffers_its_own_side_channel_and_core() -> None:
    argv = run_argv("img:1", Engine("d", 8200, "kv_consumer", 5601, cpu=1))
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config == json.loads(kv_transfer_config("kv_consumer"))
    assert config["kv_connector"] == "NixlConnector" and config["kv_buffer_device"] == "cpu"
    env = env_of(argv)
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5601" and env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"


PROM = """\
# HELP vllm:prompt_tokens_by_source_total Prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 43.0
vllm:prompt_tokens_by_source_total{engine="1",model_name="m",source="external_kv_transfer"} 7.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 43.0
"""


def test_metrics_are_summed_over_the_series_that_match_the_labels() -> None:
    values = parse_metrics(PROM)
    assert metric(values, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 50.0
    assert metric(values, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer", engine="0") == 43.0
    assert metric(values, "vllm:prompt_tokens_by_source_total", source="local_compute") == 0.0
    assert metric(values, "vllm:prompt_tokens_total") == 43.0
    assert metric(values, "vllm:absent_total") == 0.0


@pytest.mark.parametrize(
    ("text", "gib"), [("2.858GiB / 23.54GiB", 2.858), ("512MiB / 23.54GiB", 0.5), ("1024KiB / 1GiB", 2**-10)]
)
def test_docker_memory_usage_in_gib(text: str, gib: float) -> None:
    assert parse_mem_usage(text) == pytest.approx(gib)


def test_unreadable_memory_usage_is_an_error() -> None:
    with pytest.raises(ValueError, match="unexpected memory usage"):
        parse_mem_usage("-- / --")
