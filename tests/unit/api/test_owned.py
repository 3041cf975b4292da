"""The tables of flags users may not pass by hand cover every flag the planner can emit, so they cannot drift.

Two views of "can emit": every `--flag` spelled in the modules that build the command lines (statically, so a
flag behind a rare setting counts too), and every flag in the command lines of the examples and a set of
variants that switch on each setting (dynamically, which also sees flags built from parts, like
`--prefill-selector`).
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from disagg.api.documents import load_documents
from disagg.api.owned import OWNED_ENGINE_FLAGS, OWNED_FRONTEND_FLAGS, OWNED_ROUTER_FLAGS
from disagg.api.resolve import effective_engine
from disagg.api.validate import validate_deployment
from disagg.plan import build_plan
from tests.conftest import EXAMPLES, REPO

PLAN = REPO / "operator" / "disagg" / "plan"
ENGINE_MODULES = [PLAN / "engine_args.py", PLAN / "pool.py"]
ROUTER_MODULES = [PLAN / "router.py"]
FRONTEND_MODULES = [PLAN / "frontend.py"]
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")

VARIANTS: list[dict[str, Any]] = [
    {"engine": {"maxModelLen": 8192, "blockSize": 16, "kvCacheDtype": "fp8", "gpuMemoryUtilization": 0.9}},
    {"engine": {"maxNumSeqs": 64, "maxNumBatchedTokens": 8192, "prefixCaching": False, "shutdownTimeoutSeconds": 30}},
    {"engine": {"speculative": {"method": "ngram", "numSpeculativeTokens": 2}, "all2allBackend": "naive"}},
    {
        "engine": {
            "chat": {
                "template": "/t.jinja",
                "templateContentFormat": "openai",
                "reasoningParser": "qwen3",
                "toolCallParser": "hermes",
                "enableAutoToolChoice": True,
                "defaultTemplateKwargs": {"a": 1},
            }
        }
    },
    {"model": {"name": "m", "revision": "main", "trustRemoteCode": True, "servedName": "served"}},
    {"decode": {"tensorParallel": 16, "pipelineParallel": 2, "nodesPerReplica": 4}},
    {"decode": {"dataParallel": 8, "nodesPerReplica": 2, "expertParallel": True, "decodeContextParallel": 1}},
    {"prefill": {"tensorParallel": 4, "prefillContextParallel": 2, "decodeContextParallel": 2}},
    {"prefill": {"engine": {"prefixCaching": True}}},
    {"frontend": {"render": {"enabled": True}}},
    {"transfer": {"connector": "moriio"}},
    {"transfer": {"connector": "mooncake"}},
    {
        "transfer": {"connector": "moriio", "moriio": {"mode": "read"}},
        "frontend": {"router": {"implementation": "vllm-router"}},
    },
    {"frontend": {"router": {"implementation": "vllm-router"}}},
    {"transfer": {"nixl": {"bidirectional": {"enabled": True}}}, "frontend": {"router": {"policy": "least_loaded"}}},
    {"model": {"name": "nvidia/NVIDIA-Nemotron-H-8B"}},
]


def _strings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def _spelled_flags(modules: list[Path]) -> set[str]:
    return {flag for module in modules for text in _strings(module) for flag in FLAG.findall(text)}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        base[key] = _merge(base.get(key) or {}, value) if isinstance(value, dict) and key != "model" else value
    return base


def _documents() -> Iterator[dict[str, Any]]:
    bases = [load_documents(path.read_text())[0].content for path in EXAMPLES]
    yield from bases
    minimal = bases[0]
    for variant in VARIANTS:
        document = copy.deepcopy(minimal)
        _merge(document["spec"], copy.deepcopy(variant))
        yield document


def _without(argv: list[str], user: list[str]) -> list[str]:
    """The rendered part of a command line: the user's extraArgs come last, except before the start rank that
    `disagg plan` resolves for a data-parallel worker."""
    tail = argv[-2:] if argv[-2:-1] == ["--data-parallel-start-rank"] else []
    head = argv[: len(argv) - len(tail)]
    assert head[len(head) - len(user) :] == user or not user
    return head[: len(head) - len(user)] + tail


def _emitted() -> tuple[set[str], set[str], set[str]]:
    engine_flags: set[str] = set()
    router_flags: set[str] = set()
    frontend_flags: set[str] = set()
    for document in _documents():
        result = validate_deployment(document)
        assert result.deployment is not None, result.problems
        spec = result.deployment.spec
        plan = build_plan(result.deployment, "ns")
        for command in plan.engines:
            user = effective_engine(spec, command.role).extra_args
            for argv in filter(None, (command.argv, command.worker_argv)):
                engine_flags |= {arg.split("=", 1)[0] for arg in _without(argv, user) if arg.startswith("--")}
        if plan.router_argv is not None:
            user = spec.frontend.router.extra_args
            router_flags |= {arg for arg in _without(plan.router_argv, user) if arg.startswith("--")}
        if plan.frontend_argv is not None:
            user = spec.frontend.router.extra_args
            frontend_flags |= {arg for arg in _without(plan.frontend_argv, user) if arg.startswith("--")}
    return engine_flags, router_flags, frontend_flags


EMITTED_ENGINE, EMITTED_ROUTER, EMITTED_FRONTEND = _emitted()


@pytest.mark.parametrize("flag", sorted(_spelled_flags(ENGINE_MODULES)))
def test_every_engine_flag_the_planner_spells_is_owned(flag: str) -> None:
    assert flag in OWNED_ENGINE_FLAGS, f"{flag} is rendered; add it to OWNED_ENGINE_FLAGS with the field to use"


@pytest.mark.parametrize("flag", sorted(EMITTED_ENGINE))
def test_every_engine_flag_the_planner_emits_is_owned(flag: str) -> None:
    assert flag in OWNED_ENGINE_FLAGS, f"{flag} is rendered; add it to OWNED_ENGINE_FLAGS with the field to use"


@pytest.mark.parametrize("flag", sorted(_spelled_flags(ROUTER_MODULES) | EMITTED_ROUTER))
def test_every_router_flag_the_planner_emits_is_owned(flag: str) -> None:
    assert flag in OWNED_ROUTER_FLAGS, f"{flag} is rendered; add it to OWNED_ROUTER_FLAGS with the field to use"


@pytest.mark.parametrize("flag", sorted(_spelled_flags(FRONTEND_MODULES) | EMITTED_FRONTEND))
def test_every_frontend_flag_the_planner_emits_is_owned(flag: str) -> None:
    assert flag in OWNED_FRONTEND_FLAGS, f"{flag} is rendered; add it to OWNED_FRONTEND_FLAGS with the field to use"


def test_the_variants_reach_the_rare_flags() -> None:
    """The dynamic view is only as good as its inputs: the variants must switch on what the examples do not."""
    spelled = _spelled_flags(ENGINE_MODULES)
    assert spelled <= EMITTED_ENGINE, sorted(spelled - EMITTED_ENGINE)
    assert {"--prefill-selector", "--decode-selector", "--vllm-discovery-address"} <= EMITTED_ROUTER
    assert _spelled_flags(FRONTEND_MODULES) <= EMITTED_FRONTEND, sorted(
        _spelled_flags(FRONTEND_MODULES) - EMITTED_FRONTEND
    )
