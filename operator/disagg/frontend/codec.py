"""JSON on the request path: orjson writes the engine legs' bodies and reads the engines' answers; the standard
library reads the client's body and writes what orjson refuses.

Every client request costs two engine bodies written and two engine answers read; with the standard library that
was about a tenth of the frontend's CPU per request (bench/frontend, docs/performance.md).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import orjson


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def loads_request(raw: bytes) -> Any:
    """A client's body: strict JSON (RFC 8259), read by the standard library. orjson would read an integer past 64
    bits as a float (a seed of 2**70 + 1 would reach the engines changed); `NaN` and `Infinity` are refused, since
    the engine bodies are written by orjson, which would turn them into null."""
    return json.loads(raw, parse_constant=_no_constant)


def loads_reply(raw: bytes) -> Any:
    """An engine's answer: what Python's json writes, `-Infinity` log-probabilities included. What the frontend reads
    from it (KV transfer parameters, usage, text) holds no integer past 64 bits, which orjson reads as a float."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def dumps_body(body: Any) -> bytes:
    """An engine leg's body, compact UTF-8. Integers past 64 bits and keys that are not strings, which orjson
    refuses, are written by the standard library."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
