"""Shared by the two argument checkers, vllm_argcheck.py and router_argcheck.py. They run as scripts inside the
contract venv, so they import this module from their own folder (sys.path[0]); it needs nothing but the stdlib.

Both speak the same protocol: a JSON list of items on stdin, a JSON list of results on stdout (and nothing else
there: engines and libraries log to stdout, so fd 1 is pointed at stderr while the answer goes to a private copy).

argparse resolves an option token through `ArgumentParser._parse_optional`, which (Python 3.11+) returns None or
a tuple whose first item is the matched action, then the option string and any `=value` glued to the token.
`note_if_inexact` compares that resolution with the token as written: anything but the exact option string
(with its value attached by `=`, or glued on for single-dash options) is a prefix or a rewrite argparse accepted
silently, which a renderer must never rely on.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any, TextIO


def note_if_inexact(result: Any, arg_string: str, sink: list[tuple[str, str]]) -> None:
    """Append (token, option it resolved to) to `sink` when `arg_string` is not an exact spelling of it."""
    if result is None or result[0] is None:
        return
    option_string: str = result[1]
    explicit_arg: str | None = result[2]
    exact = {option_string}
    if explicit_arg is not None:
        exact.add(f"{option_string}={explicit_arg}")
        # Single-dash options may carry their value glued on: `-x5`.
        if not option_string.startswith("--"):
            exact.add(f"{option_string}{explicit_arg}")
    if arg_string not in exact:
        sink.append((arg_string, option_string))


def argparse_message(captured: str, exit_code: object) -> str:
    """argparse prints the usage block and then "<prog>: error: <message>"; keep the message, which may span lines
    (vLLM puts a pydantic ValidationError repr into it)."""
    text = captured.strip()
    start = text.find(": error: ")
    if start >= 0:
        return text[text.rfind("\n", 0, start) + 1 :]
    return text.splitlines()[-1] if text else f"argparse exited with status {exit_code}"


def jsonable(value: Any) -> Any:
    """A parsed value as JSON: enums by value, dataclasses and mappings as objects, anything else by repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return repr(value)


def failure(exc: BaseException) -> str:
    """One line for an exception the checked code raised (the traceback with DISAGG_ARGCHECK_DEBUG set)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code})"
    if os.environ.get("DISAGG_ARGCHECK_DEBUG"):
        traceback.print_exc()
    return f"{type(exc).__name__}: {exc}"


def finish(result: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    result["ok"] = not errors
    result["error"] = "; ".join(errors) if errors else None
    return result


def expectation_problems(result: Mapping[str, Any], ok: bool, error_has: str, parsed: Mapping[str, Any]) -> list[str]:
    """What a self-test case's result gets wrong: the verdict, the error text, and the parsed values."""
    problems = []
    if result["ok"] != ok:
        problems.append(f"ok={result['ok']} expected {ok}")
    if error_has and error_has not in (result["error"] or ""):
        problems.append(f"error lacks {error_has!r}")
    for key, want in parsed.items():
        got = (result["parsed"] or {}).get(key)
        if got != want:
            problems.append(f"parsed[{key}]={got!r} expected {want!r}")
    return problems


def private_stdout() -> TextIO:
    """Point fd 1 at stderr for everything else and return a private copy of the original stdout for the answer."""
    out: TextIO = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def answer(out: TextIO, check: Callable[[Mapping[str, Any]], dict[str, Any]]) -> int:
    """Read the items from stdin, check each, write the results as JSON to `out`. Exit status 2 on bad input."""
    try:
        items = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(items, list):
        print("stdin must hold a JSON list of items", file=sys.stderr)
        return 2
    results = [check(item if isinstance(item, dict) else {"id": None, "argv": item}) for item in items]
    json.dump(results, out, indent=1)
    out.write("\n")
    out.flush()
    return 0
