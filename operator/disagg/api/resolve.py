"""Derived facts every later stage agrees on: a pool's effective engine settings and the model family."""

from __future__ import annotations

import re
from typing import Literal

from .deployment import DisaggDeploymentSpec
from .engine import EngineSettings
from .model import ModelSpec
from .pool import PoolName, PoolSpec
from .types import EnvVar

ResolvedFamily = Literal["dense", "moe", "mla", "hybrid-ssm"]

# Well-known model names whose architecture changes what P/D needs. Matching is on the repository name, case-
# insensitive; anything unknown stays "dense" (no presets), and users can always set spec.model.family.
_FAMILY_BY_NAME: tuple[tuple[str, ResolvedFamily], ...] = (
    (
        r"nemotron-h|nemotron-3|jamba|bamba|mamba|falcon-h1|granite-4\.0-h|zamba|qwen3-next|qwen3\.5|qwen3\.8|"
        r"kimi-linear|lfm2|plamo2",
        "hybrid-ssm",
    ),
    (r"deepseek-v[23]|deepseek-r1|kimi-k2|glm-5|longcat|mistral-large-3", "mla"),
    (
        r"mixtral|qwen[0-9.]*-[0-9.]+b-a[0-9.]+b|qwen3-coder-[0-9]+b-a|gpt-oss|llama-4|dbrx|olmoe|phimoe|glm-4\.[5-7]|"
        r"ernie-4\.5-[0-9]+b-a|minimax",
        "moe",
    ),
)


def resolve_family(model: ModelSpec) -> ResolvedFamily:
    """The family that decides presets: the user's choice, or one inferred from a well-known model name."""
    if model.family != "auto":
        return model.family
    name = model.name.lower()
    for pattern, family in _FAMILY_BY_NAME:
        if re.search(pattern, name):
            return family
    return "dense"


def pool_of(spec: DisaggDeploymentSpec, role: PoolName) -> PoolSpec:
    return spec.prefill if role == "prefill" else spec.decode


def effective_engine(spec: DisaggDeploymentSpec, role: PoolName) -> EngineSettings:
    """spec.engine with the pool's engine settings laid over it (set fields win; env merges by name)."""
    shared = spec.engine
    override = pool_of(spec, role).engine
    merged: dict[str, object] = {}
    for name in EngineSettings.model_fields:
        if name in ("env", "extra_args"):
            continue
        own = getattr(override, name)
        merged[name] = own if own is not None else getattr(shared, name)
    merged["env"] = merge_env(shared.env, override.env)
    merged["extra_args"] = [*shared.extra_args, *override.extra_args]
    return EngineSettings.model_construct(**merged)  # type: ignore[arg-type]


def merge_env(base: list[EnvVar], override: list[EnvVar]) -> list[EnvVar]:
    """Environment lists merged by name: later entries replace earlier ones in place, new ones append."""
    merged: dict[str, EnvVar] = {var.name: var for var in base}
    for var in override:
        merged[var.name] = var
    return list(merged.values())


def gpus_per_replica(pool: PoolSpec) -> int:
    """GPUs one replica uses: TP x PP x PCP x DP (DCP and EP reuse those ranks)."""
    return pool.tensor_parallel * pool.pipeline_parallel * pool.prefill_context_parallel * pool.data_parallel


def gpus_per_pod(pool: PoolSpec) -> int:
    return pool.gpus_per_node or gpus_per_replica(pool) // pool.nodes_per_replica


def is_multi_node(pool: PoolSpec) -> bool:
    return pool.nodes_per_replica > 1


def operator_scales(pool: PoolSpec) -> bool:
    return pool.autoscaling.enabled and pool.autoscaling.controller == "operator"
