"""Each engine setting becomes exactly its vLLM flag (the contract tier checks that vLLM's parser accepts them; this
checks that each field lands on the right flag with its value, which a renamed flag would break)."""

from __future__ import annotations

from disagg.api.engine import ChatSettings, EngineSettings
from disagg.plan.engine_args import _engine_settings, chat_argv
from disagg.plan.serving import DRAIN_SECONDS, shutdown_timeout


def test_every_engine_setting_is_its_flag_with_its_value() -> None:
    engine = EngineSettings.model_validate(
        {
            "maxModelLen": 32768,
            "blockSize": 32,
            "kvCacheDtype": "fp8",
            "gpuMemoryUtilization": 0.85,
            "maxNumSeqs": 128,
            "maxNumBatchedTokens": 8192,
            "prefixCaching": False,
            "speculative": {
                "method": "eagle3",
                "numSpeculativeTokens": 3,
                "model": "org/draft",
                "extraConfig": {"draft_tensor_parallel_size": 1},
            },
            "all2allBackend": "deepep_low_latency",
        }
    )
    assert _engine_settings(engine) == [
        "--max-model-len", "32768",
        "--block-size", "32",
        "--kv-cache-dtype", "fp8",
        "--gpu-memory-utilization", "0.85",
        "--max-num-seqs", "128",
        "--max-num-batched-tokens", "8192",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"method":"eagle3","num_speculative_tokens":3,"model":"org/draft","draft_tensor_parallel_size":1}',
        "--all2all-backend", "deepep_low_latency",
    ]  # fmt: skip


def test_unset_settings_leave_vllm_s_defaults_and_prefix_caching_can_be_forced_on() -> None:
    assert _engine_settings(EngineSettings()) == []
    assert _engine_settings(EngineSettings.model_validate({"prefixCaching": True})) == ["--enable-prefix-caching"]
    speculative = EngineSettings.model_validate({"speculative": {"method": "mtp", "numSpeculativeTokens": 1}})
    assert _engine_settings(speculative) == ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']


def test_every_chat_setting_is_its_flag_with_its_value() -> None:
    chat = ChatSettings.model_validate(
        {
            "template": "{{ messages }}",
            "templateContentFormat": "openai",
            "defaultTemplateKwargs": {"enable_thinking": False},
            "reasoningParser": "qwen3",
            "toolCallParser": "hermes",
            "enableAutoToolChoice": True,
        }
    )
    assert chat_argv(chat) == [
        "--chat-template", "{{ messages }}",
        "--chat-template-content-format", "openai",
        "--default-chat-template-kwargs", '{"enable_thinking":false}',
        "--reasoning-parser", "qwen3",
        "--tool-call-parser", "hermes",
        "--enable-auto-tool-choice",
    ]  # fmt: skip
    assert chat_argv(ChatSettings()) == []


def test_the_shutdown_timeout_is_the_spec_s_else_the_drain_of_gated_pools_else_vllm_s_default() -> None:
    # engine_argv appends it after the engine settings (plan/serving.py decides it)
    assert shutdown_timeout(30, gated=False) == 30
    assert shutdown_timeout(45, gated=True) == 45
    assert shutdown_timeout(None, gated=True) == DRAIN_SECONDS
    assert shutdown_timeout(None, gated=False) is None
