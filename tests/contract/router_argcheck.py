"""Check `vllm-router` argument lists with the real vllm-router 0.1.17 launcher, without serving.

Runs INSIDE the contract venv made by tests/contract/env.sh:

    PY="$(tests/contract/env.sh | tail -n1)"
    echo '[{"id": "r0", "argv": ["--vllm-pd-disaggregation", "--service-discovery", ...]}]' \
        | "$PY" tests/contract/router_argcheck.py
    "$PY" tests/contract/router_argcheck.py --selftest

Input (stdin): a JSON list of items {"id": str, "argv": [str, ...]}; argv is what follows `vllm-router`.
Output (stdout, nothing else is written there): a JSON list, one entry per item, same order:
    {"id": str, "ok": bool, "error": str | null, "errors": [str, ...], "warnings": [str, ...],
     "parsed": {RouterArgs fields} | null, "validation": str}

The console script `vllm-router` is vllm_router.launch_router:main, which does
    parse_router_args(argv)            argparse + RouterArgs.add_cli_args -> RouterArgs.from_cli_args
    launch_router(router_args)         RouterArgs._validate_router_args(), then
                                       Router.from_args(args) -> vllm_router_rs.Router(**kwargs), then
                                       .start(): Rust RouterConfig conversion + validate(), THEN serving.
The first three steps run here in-process. The Rust config validation exists only inside start(), before
anything is bound or contacted (the first thing start() prints after validating is the marker below).
So, per item, a child process runs start() inside a new, empty network namespace (`unshare --net`, needs
root or user namespaces) and is killed as soon as the marker appears: a config error surfaces as the
ValueError start() raises, and nothing can leave the namespace even if the router got further.
"validation" says which stages ran: "python+rust" or "python only (<reason>)".

As for vLLM, every option token must be an exact option string: argparse accepts unambiguous prefixes
(e.g. `--vllm-pd` for `--vllm-pd-disaggregation`) and the checker reports them as errors.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import io
import json
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from argcheck_common import (
    answer,
    argparse_message,
    expectation_problems,
    failure,
    finish,
    jsonable,
    note_if_inexact,
    private_stdout,
)
from vllm_router.launch_router import parse_router_args
from vllm_router.router import Router
from vllm_router.router_args import RouterArgs

# Printed by the Rust server::startup right after RouterConfig.validate() succeeded and before logging,
# metrics or listeners are set up (observed with 0.1.17; see README).
STARTUP_MARKER = "DEBUG: Server startup function called"
CHILD_FLAG = "--_start-child"
CHILD_TIMEOUT_S = 20.0


@contextlib.contextmanager
def _record_resolutions(sink: list[tuple[str, str]]) -> Iterator[None]:
    """Record abbreviations argparse resolves while the launcher's own parser runs.

    parse_router_args builds a fresh argparse.ArgumentParser per call, so the spy is put on the class
    for the duration of that call. It observes only (Python 3.11 `_parse_optional` returns None or
    (action, option_string, explicit_arg)) and hands back the result unchanged.
    """
    original: Callable[[argparse.ArgumentParser, str], Any] = argparse.ArgumentParser._parse_optional

    def spy(self: argparse.ArgumentParser, arg_string: str) -> Any:
        result = original(self, arg_string)
        note_if_inexact(result, arg_string, sink)
        return result

    with mock.patch.object(argparse.ArgumentParser, "_parse_optional", spy):
        yield


def _selector_warnings(argv: Sequence[str]) -> list[str]:
    """RouterArgs._parse_selector silently drops items without '='; say so."""
    warnings = []
    selector_flags = {"--selector", "--prefill-selector", "--decode-selector"}
    current: str | None = None
    for token in argv:
        if token.startswith("-"):
            current = token if token in selector_flags else None
            continue
        if current is not None and "=" not in token:
            warnings.append(f"{current} item {token!r} has no '=' and is ignored by vllm-router")
    return warnings


# ----------------------------------------------------------------------------------------------
# Rust-side validation in a throw-away network namespace
# ----------------------------------------------------------------------------------------------


def _netns_prefix() -> list[str] | None:
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]):
        probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return prefix
    return None


def _child_main() -> int:
    """Child side: run the launcher's steps, then Router.start(), reporting on stdout."""
    argv = json.load(sys.stdin)
    router_args = parse_router_args(argv)
    router_args._validate_router_args()
    router = Router.from_args(router_args)
    try:
        router.start()
    except Exception as exc:
        print(json.dumps({"exc": type(exc).__name__, "msg": str(exc)}), flush=True)
        return 3
    print(json.dumps({"exc": None, "msg": "start() returned"}), flush=True)
    return 0


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: if this checker dies, the kernel kills the child, so a
    router that got past validation can never outlive the check (PR_SET_PDEATHSIG survives exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # 1 == PR_SET_PDEATHSIG


def _rust_validate(prefix: list[str], argv: Sequence[str]) -> str | None:
    """Return None when the Rust config validation passed, else the error text."""
    child = subprocess.Popen(
        [*prefix, sys.executable, str(Path(__file__).resolve()), CHILD_FLAG],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=_die_with_parent,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(list(argv)))
    child.stdin.close()
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(timeout=left):
                continue
            line = child.stdout.readline()
            if not line:
                break
            if STARTUP_MARKER in line:
                return None
            if line.startswith("{"):
                report = json.loads(line)
                if report["exc"] is None:
                    return None
                return f"{report['exc']}: {report['msg']}"
        child.poll()
        if child.returncode is None:
            return f"router start() gave no verdict within {CHILD_TIMEOUT_S:.0f} s"
        return f"router child exited with status {child.returncode} before validating"
    finally:
        sel.close()
        if child.poll() is None:
            child.kill()
        child.wait()


# ----------------------------------------------------------------------------------------------
# Per-item checking
# ----------------------------------------------------------------------------------------------


def check_item(item: Mapping[str, Any], netns: list[str] | None, why_no_rust: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": item.get("id"),
        "ok": False,
        "error": None,
        "errors": [],
        "warnings": [],
        "parsed": None,
        "validation": "python only (not reached)",
    }
    errors: list[str] = result["errors"]
    try:
        argv = item.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        result["warnings"] = _selector_warnings(argv)

        resolved: list[tuple[str, str]] = []
        captured = io.StringIO()
        router_args: RouterArgs | None = None
        try:
            with _record_resolutions(resolved), contextlib.redirect_stderr(captured):
                router_args = parse_router_args(argv)
        except SystemExit as exc:
            errors.append(argparse_message(captured.getvalue(), exc.code))
        for token, option in dict.fromkeys(resolved):
            errors.append(
                f"flag {token!r} is an abbreviation of {option!r}; argparse accepts unambiguous "
                "prefixes, render the exact option string"
            )
        if router_args is not None:
            # Router.from_args rewrites the dataclass's __dict__ in place: snapshot first.
            result["parsed"] = jsonable(dataclasses.asdict(router_args))
            router_args._validate_router_args()
            if router_args.mini_lb:
                result["validation"] = "python only (--mini-lb starts the Python debug balancer)"
            else:
                Router.from_args(router_args)
                if errors:
                    result["validation"] = "python only (flag errors already found)"
                elif netns is None:
                    result["validation"] = f"python only ({why_no_rust})"
                else:
                    rust_error = _rust_validate(netns, argv)
                    result["validation"] = "python+rust"
                    if rust_error is not None:
                        errors.append(rust_error)
    except (SystemExit, Exception) as exc:
        errors.append(failure(exc))
    return finish(result, errors)


# ----------------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: str
    ok: bool
    error_has: str | None = None
    needs_rust: bool = False
    parsed: dict[str, Any] = dataclasses.field(default_factory=dict)
    warning_has: str | None = None


K8S_PD = (
    "--vllm-pd-disaggregation --service-discovery --prefill-selector app=x --decode-selector app=y "
    "--service-discovery-port 8000 --service-discovery-namespace ns --host 0.0.0.0 --prometheus-host 0.0.0.0"
)
STATIC_PD = "--vllm-pd-disaggregation --prefill http://p:8000 --decode http://d:8000"

SELFTEST: tuple[Case, ...] = (
    Case(
        "k8s-pd",
        K8S_PD,
        ok=True,
        parsed={
            "vllm_pd_disaggregation": True,
            "service_discovery": True,
            "prefill_selector": {"app": "x"},
            "decode_selector": {"app": "y"},
            "service_discovery_port": 8000,
            "service_discovery_namespace": "ns",
            "host": "0.0.0.0",
            "prometheus_host": "0.0.0.0",
            "prometheus_port": 29000,
            "kv_connector": "nixl",
            "policy": "cache_aware",
        },
    ),
    Case(
        "k8s-pd-policies",
        K8S_PD + " --prefill-policy cache_aware --decode-policy round_robin --port 8080 --prometheus-port 9090",
        ok=True,
        parsed={"prefill_policy": "cache_aware", "decode_policy": "round_robin", "port": 8080},
    ),
    Case(
        "static-pd-bootstrap",
        "--vllm-pd-disaggregation --prefill http://p:8000 8998 --prefill http://q:8000 none --decode http://d:8000"
        " --kv-connector mooncake",
        ok=True,
        parsed={"prefill_urls": [["http://p:8000", 8998], ["http://q:8000", None]], "decode_urls": ["http://d:8000"]},
    ),
    Case("wrong-pd-flag", "--pd-disaggregation --prefill http://p:8000", ok=False, error_has="unrecognized"),
    Case("prefix-flag", "--vllm-pd --service-discovery --prefill-selector a=b", ok=False, error_has="abbreviation"),
    Case("bad-policy", STATIC_PD + " --policy least_loaded", ok=False, error_has="invalid choice"),
    Case("pd-missing-decode", "--vllm-pd-disaggregation --prefill http://p:8000", ok=False, error_has="--decode"),
    Case(
        "bad-bootstrap-port",
        "--vllm-pd-disaggregation --prefill http://p:8000 x --decode http://d:8000",
        ok=False,
        error_has="bootstrap port",
    ),
    Case("affinity-ttl-zero", STATIC_PD + " --kv-aware-session-affinity-ttl-secs 0", ok=False, error_has="31536000"),
    Case("port-out-of-range", STATIC_PD + " --port 70000", ok=False, error_has="Overflow"),
    Case(
        "pd-discovery-without-selectors",
        "--vllm-pd-disaggregation --service-discovery --service-discovery-port 8000",
        ok=False,
        error_has="non-empty selector",
        needs_rust=True,
    ),
    Case(
        "moriio-without-discovery-address",
        STATIC_PD + " --kv-connector moriio",
        ok=False,
        error_has="MoRI-IO",
        needs_rust=True,
    ),
    Case(
        "pd-kv-events-need-kv-aware",
        STATIC_PD + " --pd-kv-events http://p:8000=tcp://p:5557",
        ok=False,
        error_has="kv_aware",
        needs_rust=True,
    ),
    Case(
        "selector-without-equals",
        "--vllm-pd-disaggregation --service-discovery --prefill-selector app=x app2 --decode-selector app=y",
        ok=True,
        warning_has="ignored",
    ),
)


def _selftest(netns: list[str] | None, why_no_rust: str) -> int:
    failures = skipped = 0
    for case in SELFTEST:
        if case.needs_rust and netns is None:
            skipped += 1
            print(f"[skip] {case.id}: {why_no_rust}", file=sys.stderr)
            continue
        res = check_item({"id": case.id, "argv": case.argv.split()}, netns, why_no_rust)
        problems = expectation_problems(res, case.ok, case.error_has, case.parsed)
        if case.warning_has and not any(case.warning_has in w for w in res["warnings"]):
            problems.append(f"warnings lack {case.warning_has!r}")
        failures += bool(problems)
        detail = "; ".join(problems) if problems else (res["error"] or res["validation"])
        print(f"[{'FAIL' if problems else 'ok'}] {case.id}: {detail}", file=sys.stderr)
    passed = len(SELFTEST) - failures - skipped
    print(f"selftest: {passed} passed, {failures} failed, {skipped} skipped", file=sys.stderr)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == [CHILD_FLAG]:
        return _child_main()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true", help="run built-in cases and exit non-zero on failure")
    ap.add_argument("--no-rust", action="store_true", help="skip the Rust config validation (no child processes)")
    opts = ap.parse_args(args)

    # Keep stdout for the JSON answer alone (the router's Python side logs, Rust prints).
    out = private_stdout()

    # The launcher's parser takes its prog name from argv[0]; make messages read as the real CLI's.
    sys.argv[0] = "vllm-router"
    netns = None if opts.no_rust else _netns_prefix()
    why_no_rust = "--no-rust given" if opts.no_rust else "no usable `unshare --net` on this machine"
    if opts.selftest:
        return _selftest(netns, why_no_rust)
    return answer(out, lambda item: check_item(item, netns, why_no_rust))


if __name__ == "__main__":
    sys.exit(main())
