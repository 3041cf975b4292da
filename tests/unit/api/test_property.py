"""Validation never crashes: random and mutated documents give a model or problems, nothing else."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from tests.conftest import EXAMPLES

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["nixl", "moe", "16Gi", "-1", "1e9", "2s", "hybrid-ssm", "custom", "", "Qwen/Qwen3-32B"]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
_BASES = [load_documents(path.read_text())[0].content for path in EXAMPLES]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _assert_total(document: Any) -> None:
    result = validate_deployment(document)
    assert result.ok or result.problems
    for problem in result.problems:
        assert problem.path and problem.message and problem.fix


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_arbitrary_documents(document: Any) -> None:
    _assert_total(document)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_BASES), st.data())
def test_mutated_examples(base: dict[str, Any], data: st.DataObject) -> None:
    document = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_paths(document)))
        replacement = data.draw(_JSON)
        if not path:
            document = replacement
            break
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = replacement
    _assert_total(document)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
@example("\x1f")  # the YAML reader refuses control characters before parsing starts
@example("{[1]: 2}")  # an unhashable key
@example("a: 1\na: 2")  # a duplicate key
def test_arbitrary_yaml_text_never_raises_anything_but_a_document_error(text: str) -> None:
    from disagg.api.documents import DocumentError

    try:
        documents = load_documents(text)
    except DocumentError:
        return
    for document in documents:
        _assert_total(document.content)
