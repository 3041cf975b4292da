"""`spec.engine` and each pool's `engine`: how vLLM engines are configured."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .types import ArgList, EnvList, FreeForm, Image

DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.33.0"
PluginName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]


class SpeculativeSettings(ApiModel):
    """Speculative decoding. The method (and draft model) must match on both pools; token counts may differ."""

    method: PluginName = Field(description="Speculative method, for example mtp, eagle, eagle3, ngram or draft_model.")
    num_speculative_tokens: Annotated[int, Field(ge=1, le=64)] = Field(
        description="Tokens proposed per step. Prefill and decode may use different counts."
    )
    model: Annotated[str, Field(min_length=1, max_length=512)] | None = Field(
        default=None, description="Draft model (repository id or path) for methods that use one."
    )
    extra_config: FreeForm = Field(
        default_factory=dict,
        description="More keys of vLLM's --speculative-config JSON, passed through as written.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class ChatSettings(ApiModel):
    """Chat template and output parsers: one source for the engines and the optional render tier."""

    template: Annotated[str, Field(min_length=1, max_length=65536)] | None = Field(
        default=None, description="Chat template (a path inside the image or model storage, or the template text)."
    )
    template_content_format: Literal["auto", "string", "openai"] | None = Field(
        default=None, description="How message content is passed to the template (vLLM --chat-template-content-format)."
    )
    default_template_kwargs: FreeForm | None = Field(
        default=None,
        description="Default keyword arguments for the chat template (vLLM --default-chat-template-kwargs).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    reasoning_parser: PluginName | None = Field(
        default=None, description="Reasoning parser name (vLLM --reasoning-parser), for example qwen3."
    )
    tool_call_parser: PluginName | None = Field(
        default=None, description="Tool call parser name (vLLM --tool-call-parser), for example hermes."
    )
    enable_auto_tool_choice: bool = Field(
        default=False, description="Let the model choose tools itself (vLLM --enable-auto-tool-choice)."
    )


class EngineSettings(ApiModel):
    """vLLM engine settings. Unset fields keep vLLM's own defaults; a pool's engine overrides spec.engine."""

    image: Image | None = Field(default=None, description=f"vLLM container image. Default: {DEFAULT_ENGINE_IMAGE}.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy of engine containers. Default: IfNotPresent."
    )
    max_model_len: Annotated[int, Field(ge=16, le=16_777_216)] | None = Field(
        default=None, description="Maximum context length in tokens (vLLM --max-model-len). Default: the model's."
    )
    block_size: Annotated[int, Field(ge=1, le=8192)] | None = Field(
        default=None,
        description="KV cache block size in tokens (vLLM --block-size). Prefill and decode may differ only when "
        "prefill's is smaller and the model is not hybrid.",
    )
    kv_cache_dtype: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$")] | None = Field(
        default=None,
        description="KV cache data type (vLLM --kv-cache-dtype), e.g. auto, fp8, fp8_e4m3. Must match on both pools.",
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Share of GPU memory vLLM may use (vLLM --gpu-memory-utilization). vLLM default 0.92."
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        default=None, description="Maximum concurrent sequences per engine (vLLM --max-num-seqs)."
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=16_777_216)] | None = Field(
        default=None, description="Maximum tokens per scheduler step (vLLM --max-num-batched-tokens)."
    )
    prefix_caching: bool | None = Field(default=None, description="Automatic prefix caching. vLLM default: on.")
    speculative: SpeculativeSettings | None = Field(
        default=None, description="Speculative decoding (vLLM --speculative-config)."
    )
    all2all_backend: PluginName | None = Field(
        default=None,
        alias="all2allBackend",
        description="All-to-all backend for expert parallelism (vLLM --all2all-backend), e.g. deepep_low_latency.",
    )
    shutdown_timeout_seconds: Annotated[int, Field(ge=0, le=86_400)] | None = Field(
        default=None,
        description="Seconds vLLM waits for in-flight requests on shutdown (vLLM --shutdown-timeout). The pod's "
        "termination grace period is sized from it.",
    )
    startup_timeout_seconds: Annotated[int, Field(ge=60, le=86_400)] | None = Field(
        default=None,
        description="How long an engine may take to load before Kubernetes restarts it (sizes the startup probe). "
        "Default: 1800.",
    )
    nofile_limit: Annotated[int, Field(ge=1024, le=16_777_216)] | None = Field(
        default=None,
        description="Raise the open-files soft limit (ulimit -n) before starting the engine, up to the container's "
        "hard limit. High-concurrency P/D can exhaust the default.",
    )
    env: EnvList = Field(
        default_factory=list,
        description="Extra environment variables. A pool's entries replace spec.engine entries of the same name.",
    )
    extra_args: ArgList = Field(
        default_factory=list,
        description="Extra vLLM command-line arguments, appended after the ones the operator renders. Flags the "
        "operator owns (ports, parallelism, --kv-transfer-config, ...) are refused: use the fields instead.",
    )


class EngineSpec(EngineSettings):
    """Defaults for every vLLM pool, plus settings that must be identical across all engines."""

    chat: ChatSettings = Field(
        default_factory=ChatSettings,
        description="Chat template and parsers, rendered identically into every engine and the render tier.",
    )
    python_hash_seed: Annotated[int, Field(ge=0, le=4_294_967_295)] = Field(
        default=0,
        description="PYTHONHASHSEED for every engine. Engines sharing a KV store or prefix-aware routing need the "
        "same block hashes, so one value is set for all.",
    )
