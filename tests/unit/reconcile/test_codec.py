"""The reconciler's JSON codec: what it writes reads back as the same object, and what orjson refuses still works."""

from __future__ import annotations

import json
import math

import pytest

from disagg.reconcile import codec


def test_an_object_round_trips_and_is_compact_utf8() -> None:
    obj = {"metadata": {"name": "llama", "annotations": {"note": "café ✓"}}, "spec": {"replicas": 3, "f": 0.5}}
    text = codec.dumps(obj)
    assert isinstance(text, bytes)
    assert codec.loads(text) == obj
    assert b" " not in text.replace("café ✓".encode(), b"")
    assert "café ✓".encode() in text  # UTF-8, not \u escapes
    assert list(codec.loads(text)) == ["metadata", "spec"]  # key order kept


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    big = {"seed": 2**70 + 1, 1: "integer key"}
    text = codec.dumps(big)
    assert json.loads(text) == {"seed": 2**70 + 1, "1": "integer key"}


def test_nan_as_python_writes_it_is_read() -> None:
    value = codec.loads(json.dumps({"x": float("nan"), "y": float("-inf")}))
    assert math.isnan(value["x"]) and value["y"] == float("-inf")


def test_text_that_is_not_json_raises_value_error() -> None:
    with pytest.raises(ValueError):
        codec.loads(b"{not json")
    with pytest.raises(ValueError):
        codec.loads("")


def test_the_text_is_a_copy_of_its_exact_size() -> None:
    text = codec.dumps({"a": "x" * 5000})
    assert type(text) is bytes and len(text) == len('{"a":""}') + 5000
