"""Shared by the two argument checkers (run as scripts inside the contract venv, so imported from this folder).

argparse resolves an option token through `ArgumentParser._parse_optional`, which (Python 3.11+) returns None or
a tuple whose first item is the matched action, then the option string and any `=value` glued to the token.
`note_if_inexact` compares that resolution with the token as written: anything but the exact option string
(with its value attached by `=`, or glued on for single-dash options) is a prefix or a rewrite argparse accepted
silently, which a renderer must never rely on.
"""

from __future__ import annotations

from typing import Any


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
