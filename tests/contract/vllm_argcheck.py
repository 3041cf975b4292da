"""Check `vllm serve` / `vllm launch render` argument lists with vLLM's own CLI parser.

Runs INSIDE the contract venv made by tests/contract/env.sh (genuine vllm 0.33.0), normally as a
subprocess of the operator's pytest, which lives in another environment:

    PY="$(tests/contract/env.sh | tail -n1)"
    echo '[{"id": "p0", "command": "serve", "argv": ["m", "-tp", "2"], "env": {}}]' \
        | "$PY" tests/contract/vllm_argcheck.py
    "$PY" tests/contract/vllm_argcheck.py --selftest

Input (stdin): a JSON list of items
    {"id": str, "command": "serve" | "launch-render", "argv": [str, ...], "env": {str: str},
     "fields": [str, ...]  (optional: extra attribute names to report under "parsed")}
`argv` is what follows `vllm serve` (starts with the model) or `vllm launch render`.

Output (stdout, nothing else is written there): a JSON list, one entry per item, same order:
    {"id": str, "ok": bool, "error": str | null, "errors": [str, ...], "warnings": [str, ...],
     "kv_transfer_config": {...} | null, "parsed": {...} | null}

The parse path is the one `vllm` (vllm/entrypoints/cli/main.py) takes, minus starting anything:
top-level FlexibleArgumentParser -> the serve / launch subcommand's subparser_init -> parse_args ->
the subcommand's validate() -> (serve only) ServeSubcommand.cmd with its launch functions replaced by
recorders, which yields the launch mode and the api_server_count default -> AsyncEngineArgs.from_cli_args.
`create_engine_config` is NOT run: it needs the model's HF config and a device.

On top of what vLLM itself rejects, every option token must be an exact option string of the parser:
argparse (allow_abbrev=True, as vLLM builds it) silently accepts unambiguous prefixes such as
`--tensor-parallel` for `--tensor-parallel-size`, and FlexibleArgumentParser rewrites `--a_b` to `--a-b`.
A renderer that relied on either would break as soon as vLLM adds an option sharing the prefix.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from unittest import mock

# Selecting the platform has to happen before vLLM computes any CLI default: without a GPU the
# automatic detection yields UnspecifiedPlatform and EngineArgs.add_cli_args fails with
# "Failed to infer device type". The CPU platform keeps every option and choice of the parser.
import vllm.platforms
from argcheck_common import (  # this folder: the script's own sys.path[0]
    answer,
    argparse_message,
    expectation_problems,
    failure,
    finish,
    jsonable,
    note_if_inexact,
    private_stdout,
)
from vllm.platforms.cpu import CpuPlatform

vllm.platforms._current_platform = CpuPlatform()

import vllm.entrypoints.cli.launch as cli_launch  # noqa: E402
import vllm.entrypoints.cli.serve as cli_serve  # noqa: E402
import vllm.logger as vllm_logging  # noqa: E402
from vllm.config import KVTransferConfig  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.cli.types import CLISubcommand  # noqa: E402
from vllm.entrypoints.common.startup import cli_env_setup  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

COMMANDS: dict[str, list[str]] = {"serve": ["serve"], "launch-render": ["launch", "render"]}

# Reported under "parsed" when the attribute exists (engine-args value first, else namespace).
DEFAULT_FIELDS: tuple[str, ...] = (
    "model",
    "served_model_name",
    "host",
    "port",
    "headless",
    "api_server_count",
    "tokens_only",
    "enable_scale_out",
    "grpc",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_rank",
    "data_parallel_start_rank",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "data_parallel_backend",
    "data_parallel_hybrid_lb",
    "data_parallel_external_lb",
    "enable_expert_parallel",
    "decode_context_parallel_size",
    "prefill_context_parallel_size",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "enable_prefix_caching",
    "kv_cache_dtype",
    "kv_offloading_size",
    "kv_offloading_backend",
    "disable_hybrid_kv_cache_manager",
    "speculative_config",
    "kv_events_config",
    "enforce_eager",
    "dtype",
    "quantization",
    "trust_remote_code",
)


# ----------------------------------------------------------------------------------------------
# Parser construction (once per process: it takes seconds because every config class is walked)
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Cli:
    parser: FlexibleArgumentParser
    commands: dict[str, CLISubcommand]
    # Filled by the _parse_optional spies while one item is parsed: (token as argparse saw it,
    # option string it resolved to).
    resolved: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def _install_spy(parser: argparse.ArgumentParser, sink: list[tuple[str, str]]) -> None:
    """Record which option string argparse resolved each option-like token to.

    Wraps the instance's `_parse_optional` (Python 3.11 signature: returns None or
    (action, option_string, explicit_arg)). It observes only; the result is returned unchanged, so
    vLLM's parsing is untouched.
    """
    original: Callable[[str], Any] = parser._parse_optional

    def spy(arg_string: str) -> Any:
        result = original(arg_string)
        note_if_inexact(result, arg_string, sink)
        return result

    parser._parse_optional = spy  # type: ignore[method-assign]


def build_cli() -> Cli:
    # Same process setup as vllm/entrypoints/cli/main.py (sets the multiproc method env var only).
    cli_env_setup()
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands: dict[str, CLISubcommand] = {}
    for cmd in [*cli_serve.cmd_init(), *cli_launch.cmd_init()]:
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        commands[cmd.name] = cmd
    cli = Cli(parser=parser, commands=commands)
    for p in _all_parsers(parser):
        _install_spy(p, cli.resolved)
    return cli


def exact_option_strings(cli: Cli, command: str) -> set[str]:
    parser: argparse.ArgumentParser = cli.parser
    for name in COMMANDS[command]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return set(parser._option_string_actions)


# ----------------------------------------------------------------------------------------------
# Per-item checking
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _environ(overlay: Mapping[str, str]) -> Iterator[None]:
    """Apply an item's env vars for its parse only (vllm.envs reads os.environ lazily)."""
    saved = {k: os.environ.get(k) for k in overlay}
    os.environ.update(overlay)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _reset_log_once() -> None:
    """vLLM's *_once log helpers are lru_cached per process; clear them so that every item reports
    its own deprecation warnings, not only the first item that triggers one."""
    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once", "_print_error_once"):
        fn = getattr(vllm_logging, name, None)
        if fn is not None and hasattr(fn, "cache_clear"):
            fn.cache_clear()


def _flag_name(token: str) -> str:
    """`--kv-transfer-config.kv_role=x` -> `--kv-transfer-config` (vLLM's dotted JSON syntax)."""
    return token.split("=", 1)[0].split(".", 1)[0].removesuffix("+")


def _spelling_errors(argv: Sequence[str], exact: set[str]) -> list[str]:
    """Underscore spellings: FlexibleArgumentParser turns `--a_b` into `--a-b` before argparse runs,
    so the spy never sees them; check the raw tokens instead."""
    errors = []
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        name = _flag_name(token)
        if "_" in name:
            canonical = name.replace("_", "-")
            hint = f" (use {canonical})" if canonical in exact else ""
            errors.append(f"flag {name!r} is not an exact option string{hint}")
    return errors


class _Recorder:
    """Stand-in for ServeSubcommand.cmd's launch functions: records which one would run."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.args: argparse.Namespace | None = None

    def as_fn(self, mode: str) -> Callable[[argparse.Namespace], None]:
        def record(args: argparse.Namespace) -> None:
            self.mode, self.args = mode, args

        return record


def _simulate_serve_dispatch(args: argparse.Namespace) -> str:
    """Run ServeSubcommand.cmd up to the point where it would start processes.

    cmd holds the checks that happen before any engine exists (--headless with --api-server-count,
    conflicting DP load-balancing modes) and defaults api_server_count; the module-level launch
    functions it calls are swapped for recorders for the duration of the call.
    """
    if getattr(args, "grpc", False):
        # cmd would import the optional gRPC server package here; nothing else to check.
        return "grpc"
    rec = _Recorder()
    uvloop_stub = mock.Mock()
    uvloop_stub.run = lambda _coro: None
    with (
        mock.patch.object(cli_serve, "run_dp_supervisor", rec.as_fn("dp_supervisor")),
        mock.patch.object(cli_serve, "run_headless", rec.as_fn("headless")),
        mock.patch.object(cli_serve, "run_multi_api_server", rec.as_fn("multi_api_server")),
        mock.patch.object(cli_serve, "run_server", rec.as_fn("single_api_server")),
        mock.patch.object(cli_serve, "uvloop", uvloop_stub),
    ):
        cli_serve.ServeSubcommand.cmd(args)
    if rec.mode is None:
        raise RuntimeError("ServeSubcommand.cmd returned without choosing a launch path")
    return rec.mode


def _kv_transfer_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        # Not expected from the CLI (the option's type already builds the dataclass), but a YAML
        # --config could hand over a dict: build the real config class from it the same way.
        value = KVTransferConfig(**value)
    if not isinstance(value, KVTransferConfig):
        raise TypeError(f"kv_transfer_config has unexpected type {type(value).__name__}")
    out = jsonable(value)
    assert isinstance(out, dict)
    return out


def check_item(cli: Cli, item: Mapping[str, Any]) -> dict[str, Any]:
    item_id = item.get("id")
    result: dict[str, Any] = {
        "id": item_id,
        "ok": False,
        "error": None,
        "errors": [],
        "warnings": [],
        "kv_transfer_config": None,
        "parsed": None,
    }
    errors: list[str] = result["errors"]
    try:
        command = item.get("command", "serve")
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}; expected one of {sorted(COMMANDS)}")
        argv = item.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        env = item.get("env") or {}
        if not isinstance(env, dict):
            raise ValueError("env must be an object of strings")
        extra_fields = item.get("fields") or []

        exact = exact_option_strings(cli, command)
        errors.extend(_spelling_errors(argv, exact))

        collector = _Collect()
        vllm_logger = logging.getLogger("vllm")
        vllm_logger.addHandler(collector)
        cli.resolved.clear()
        _reset_log_once()
        captured = io.StringIO()
        try:
            with _environ({str(k): str(v) for k, v in env.items()}):
                args: argparse.Namespace | None = None
                try:
                    with contextlib.redirect_stderr(captured):
                        args = cli.parser.parse_args([*COMMANDS[command], *argv])
                except SystemExit as exc:
                    errors.append(argparse_message(captured.getvalue(), exc.code))
                for token, option in dict.fromkeys(cli.resolved):
                    errors.append(
                        f"flag {token!r} is an abbreviation of {option!r}; argparse accepts "
                        "unambiguous prefixes, render the exact option string"
                    )
                if args is not None:
                    top = COMMANDS[command][0]
                    cli.commands[top].validate(args)
                    launch_mode = _simulate_serve_dispatch(args) if command == "serve" else "render"
                    # What ServeSubcommand.cmd / LaunchSubcommand.cmd do before building engine args.
                    if getattr(args, "model_tag", None) is not None:
                        args.model = args.model_tag
                    engine_args = AsyncEngineArgs.from_cli_args(args)
                    result["kv_transfer_config"] = _kv_transfer_dict(engine_args.kv_transfer_config)
                    parsed: dict[str, Any] = {"launch_mode": launch_mode}
                    for name in (*DEFAULT_FIELDS, *extra_fields):
                        if hasattr(engine_args, name):
                            parsed[name] = jsonable(getattr(engine_args, name))
                        elif hasattr(args, name):
                            parsed[name] = jsonable(getattr(args, name))
                    result["parsed"] = parsed
        finally:
            vllm_logger.removeHandler(collector)
        result["warnings"] = collector.messages
    except (SystemExit, Exception) as exc:
        errors.append(failure(exc))
    return finish(result, errors)


# ----------------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------------

MODEL = "Qwen/Qwen3-0.6B"
NIXL_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    ok: bool
    command: str = "serve"
    error_has: str | None = None
    parsed: dict[str, Any] = dataclasses.field(default_factory=dict)
    kv: dict[str, Any] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)


SELFTEST: tuple[Case, ...] = (
    Case(
        "nixl-producer",
        [MODEL, "--port", "8000", "--tensor-parallel-size", "2", "--kv-transfer-config", NIXL_P],
        ok=True,
        parsed={"tensor_parallel_size": 2, "port": 8000, "launch_mode": "single_api_server"},
        kv={"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
    ),
    Case(
        "dotted-kv-consumer",
        [
            MODEL,
            "--kv-transfer-config.kv_connector",
            "NixlConnector",
            "--kv-transfer-config.kv_role",
            "kv_consumer",
            "--kv-transfer-config.kv_connector_extra_config.backends+",
            "UCX",
        ],
        ok=True,
        kv={
            "kv_connector": "NixlConnector",
            "kv_role": "kv_consumer",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        },
    ),
    Case("unknown-flag", [MODEL, "--tensor-paralel-size", "2"], ok=False, error_has="unrecognized"),
    Case("prefix-flag", [MODEL, "--tensor-parallel", "2"], ok=False, error_has="abbreviation"),
    Case("prefix-flag-eq", [MODEL, "--max-model=4096"], ok=False, error_has="abbreviation"),
    Case("underscore-flag", [MODEL, "--tensor_parallel_size", "2"], ok=False, error_has="exact option"),
    Case(
        "removed-kv-rank",
        [MODEL, "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_rank":0}'],
        ok=False,
        error_has="kv_rank",
    ),
    Case(
        "connector-without-role",
        [MODEL, "--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
        ok=False,
        error_has="kv_role",
    ),
    Case(
        "bad-role",
        [MODEL, "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"producer"}'],
        ok=False,
        error_has="kv_role",
    ),
    Case("bad-json", [MODEL, "--kv-transfer-config", "{not json"], ok=False, error_has="kv-transfer-config"),
    Case("tokens-only", [MODEL, "--tokens-only"], ok=True, parsed={"tokens_only": True}),
    Case(
        "headless-dp-start-rank",
        [
            MODEL,
            "--headless",
            "--data-parallel-size",
            "4",
            "--data-parallel-size-local",
            "2",
            "--data-parallel-start-rank",
            "2",
            "--data-parallel-address",
            "10.0.0.1",
            "--data-parallel-rpc-port",
            "13345",
            "--enable-expert-parallel",
        ],
        ok=True,
        parsed={
            "launch_mode": "headless",
            "headless": True,
            "data_parallel_start_rank": 2,
            "data_parallel_size_local": 2,
            "enable_expert_parallel": True,
            "api_server_count": 0,
        },
    ),
    Case(
        "headless-with-api-servers",
        [MODEL, "--headless", "--api-server-count", "2"],
        ok=False,
        error_has="--headless",
    ),
    Case(
        "two-dp-lb-modes",
        [MODEL, "--data-parallel-size", "2", "--data-parallel-rank", "0", "--data-parallel-hybrid-lb"],
        ok=False,
        error_has="load balancing mode",
    ),
    Case(
        "speculative-json",
        [MODEL, "--speculative-config", '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'],
        ok=True,
        parsed={"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}},
    ),
    Case("dp-internal-lb", [MODEL, "-dp", "2"], ok=True, parsed={"launch_mode": "multi_api_server"}),
    Case(
        "render",
        [MODEL, "--port", "8100"],
        ok=True,
        command="launch-render",
        parsed={"launch_mode": "render", "port": 8100},
    ),
    Case(
        "render-prefix-flag",
        [MODEL, "--served-model", "x"],
        ok=False,
        command="launch-render",
        error_has="abbreviation",
    ),
)


def _selftest(cli: Cli) -> int:
    failures = 0
    for case in SELFTEST:
        item = {"id": case.id, "command": case.command, "argv": case.argv, "env": case.env}
        res = check_item(cli, item)
        problems = expectation_problems(res, case.ok, case.error_has, case.parsed)
        for key, want in case.kv.items():
            got = (res["kv_transfer_config"] or {}).get(key)
            if got != want:
                problems.append(f"kv_transfer_config[{key}]={got!r} expected {want!r}")
        status = "FAIL" if problems else "ok"
        failures += bool(problems)
        detail = "; ".join(problems) if problems else (res["error"] or "")
        print(f"[{status}] {case.id}: {detail}", file=sys.stderr)
    print(f"selftest: {len(SELFTEST) - failures} passed, {failures} failed", file=sys.stderr)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true", help="run built-in cases and exit non-zero on failure")
    opts = ap.parse_args(argv)

    # Keep stdout for the JSON answer alone: vLLM logs to sys.stdout by default and libraries may print.
    out = private_stdout()

    cli = build_cli()
    if opts.selftest:
        return _selftest(cli)
    return answer(out, lambda item: check_item(cli, item))


if __name__ == "__main__":
    sys.exit(main())
