"""JSON between the operator and the API server, and in its own memory: orjson, with the standard library for what
orjson refuses (D250).

A pass reads every child it owns out of the cache (decode), copies the rendered objects (decode) and sends the
apply bodies (encode); the watches store every event (encode). With the standard library that was most of a
fleet's pass time after the pure core's memo; orjson encodes the ten children of a deployment about ten times
faster and decodes them about twice as fast (bench/codec_bench.py, docs/performance.md).

What differs from `json.dumps(..., separators=(",", ":"))` and `json.loads` and why it does not matter here:
- the output is UTF-8 bytes, not ASCII with `\\u` escapes: the API server reads either, and the cache's texts are
  only read back by `loads`;
- an integer past 64 bits is read as a float: the API server never sends one (its unstructured objects hold int64
  or float64 numbers), and one it would refuse in a rendered object is written by the standard library exactly;
- keys that are not strings are written by the standard library, as before.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """Compact JSON. orjson's result is copied into a bytes object of its exact size: kept as it is, each text held
    the over-allocated buffer orjson wrote it into, and a fleet's cache took 1.6 times the memory."""
    try:
        return memoryview(orjson.dumps(value)).tobytes()
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(raw: bytes | str) -> Any:
    """A JSON document; what orjson cannot read (NaN, which Python's json writes) goes to the standard library,
    which then raises the usual `ValueError` for text that is not JSON at all."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
