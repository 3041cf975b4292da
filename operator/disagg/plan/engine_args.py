"""The `vllm serve` argument list of a pool: full flag names only, in a fixed order."""

from __future__ import annotations

import json
from typing import Any, Literal

from disagg.api.engine import ChatSettings, EngineSettings
from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import ResolvedDeployment, ResolvedPool
from disagg.names import LWS_LEADER_ADDRESS_ENV, LWS_WORKER_INDEX_ENV

DP_RPC_PORT = 13345
"""Port the data-parallel coordinator of a multi-node replica listens on; every node uses the same one."""
TP_MASTER_PORT = 29501
LEADER_ADDRESS = f"$({LWS_LEADER_ADDRESS_ENV})"
WORKER_INDEX = f"$({LWS_WORKER_INDEX_ENV})"
"""LeaderWorkerSet injects the leader's address into every container; Kubernetes expands $(VAR) in args."""

NodeRole = Literal["single", "leader", "worker"]


def engine_argv(
    deployment: ResolvedDeployment,
    pool: ResolvedPool,
    kv_transfer_config: dict[str, Any] | None,
    node_role: NodeRole,
    shutdown_timeout: int | None = None,
) -> list[str]:
    """Arguments after `vllm serve`. Workers of multi-node replicas get --headless; their per-node rank is added
    by the pod's start script (see pool.py), because it depends on the LeaderWorkerSet worker index.
    `shutdown_timeout`: --shutdown-timeout, decided in plan/serving.py."""
    model = deployment.model
    argv: list[str] = [model.name]
    argv += ["--served-model-name", model.served_name or model.name]
    argv += ["--port", str(ENGINE_HTTP_PORT)]
    if model.revision:
        argv += ["--revision", model.revision]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    argv += _parallelism(pool, node_role)
    argv += _engine_settings(pool.engine)
    if shutdown_timeout is not None:
        argv += ["--shutdown-timeout", str(shutdown_timeout)]
    if node_role != "worker":
        argv += chat_argv(deployment.chat)
    if deployment.family == "hybrid-ssm":
        # Explicit, so a connector without hybrid-KV support fails loudly instead of vLLM quietly turning HMA off.
        argv.append("--no-disable-hybrid-kv-cache-manager")
    if deployment.tokens_only and node_role != "worker":
        argv.append("--tokens-only")
    if kv_transfer_config is not None:
        argv += ["--kv-transfer-config", json.dumps(kv_transfer_config, separators=(",", ":"), sort_keys=False)]
    argv += list(pool.engine.extra_args)
    return argv


def _parallelism(pool: ResolvedPool, node_role: NodeRole) -> list[str]:
    spec, layout = pool.spec, pool.layout
    argv = ["--tensor-parallel-size", str(spec.tensor_parallel)]
    if spec.pipeline_parallel > 1:
        argv += ["--pipeline-parallel-size", str(spec.pipeline_parallel)]
    if spec.data_parallel > 1:
        argv += ["--data-parallel-size", str(spec.data_parallel)]
    if layout.kind == "data-parallel":
        argv += ["--data-parallel-size-local", str(layout.ranks_per_pod)]
        argv += ["--data-parallel-address", LEADER_ADDRESS, "--data-parallel-rpc-port", str(DP_RPC_PORT)]
    elif layout.kind == "tensor-parallel":
        argv += ["--nnodes", str(layout.pods)]
        argv += ["--master-addr", LEADER_ADDRESS, "--master-port", str(TP_MASTER_PORT)]
        argv += ["--node-rank", "0" if node_role == "leader" else WORKER_INDEX]
    if node_role == "worker":
        argv.append("--headless")
    if spec.expert_parallel:
        argv.append("--enable-expert-parallel")
    if spec.decode_context_parallel > 1:
        argv += ["--decode-context-parallel-size", str(spec.decode_context_parallel)]
    if spec.prefill_context_parallel > 1:
        argv += ["--prefill-context-parallel-size", str(spec.prefill_context_parallel)]
    return argv


def _engine_settings(engine: EngineSettings) -> list[str]:
    argv: list[str] = []
    for flag, value in (
        ("--max-model-len", engine.max_model_len),
        ("--block-size", engine.block_size),
        ("--kv-cache-dtype", engine.kv_cache_dtype),
        ("--gpu-memory-utilization", engine.gpu_memory_utilization),
        ("--max-num-seqs", engine.max_num_seqs),
        ("--max-num-batched-tokens", engine.max_num_batched_tokens),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if engine.prefix_caching is not None:
        argv.append("--enable-prefix-caching" if engine.prefix_caching else "--no-enable-prefix-caching")
    if engine.speculative is not None:
        speculative = engine.speculative
        config: dict[str, Any] = {
            "method": speculative.method,
            "num_speculative_tokens": speculative.num_speculative_tokens,
        }
        if speculative.model:
            config["model"] = speculative.model
        config.update(speculative.extra_config)
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if engine.all2all_backend is not None:
        argv += ["--all2all-backend", engine.all2all_backend]
    return argv


def chat_argv(chat: ChatSettings) -> list[str]:
    """Template and parser flags, shared verbatim by the engines and the render tier."""
    argv: list[str] = []
    if chat.template is not None:
        argv += ["--chat-template", chat.template]
    if chat.template_content_format is not None:
        argv += ["--chat-template-content-format", chat.template_content_format]
    if chat.default_template_kwargs is not None:
        argv += ["--default-chat-template-kwargs", json.dumps(chat.default_template_kwargs, separators=(",", ":"))]
    if chat.reasoning_parser is not None:
        argv += ["--reasoning-parser", chat.reasoning_parser]
    if chat.tool_call_parser is not None:
        argv += ["--tool-call-parser", chat.tool_call_parser]
    if chat.enable_auto_tool_choice:
        argv.append("--enable-auto-tool-choice")
    return argv
