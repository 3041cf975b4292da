"""Text of any Unicode plane renders (D73). Regression: a character beyond the Basic Multilingual Plane (an emoji
in an annotation, an env value, a chat template or an argument) crashed rendering, because the templates' JSON
spelled it as a UTF-16 surrogate pair, which YAML refuses; that DisaggDeployment's reconcile then failed forever."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.api.documents import dump_documents, load_documents
from disagg.api.validate import validate_deployment
from disagg.render import render_deployment
from disagg.render.renderer import yaml_json
from tests.support.reconciling import MINIMAL
from tests.support.rendering import env_of, find, pod_templates

ASTRAL = "\U0001f600 \U0001d11e \U00020000 \U0010fffd"  # emoji, musical symbol, CJK extension B, plane 16


def _deployment(change: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(MINIMAL)
    change(document["spec"])
    return document


CASES = {
    "pod annotation": lambda s: s["decode"].update(podAnnotations={"note": ASTRAL}),
    "env value": lambda s: s.update(engine={"env": [{"name": "GREETING", "value": ASTRAL}]}),
    "chat template": lambda s: s.update(engine={"chat": {"template": f"{{{{ messages }}}} {ASTRAL}"}}),
    "extra argument": lambda s: s["prefill"].update(engine={"extraArgs": ["--override-generation-config", ASTRAL]}),
    "service annotation": lambda s: s.update(frontend={"service": {"annotations": {"note": ASTRAL}}}),
    "model name": lambda s: s.update(model={"name": f"org/{ASTRAL.replace(' ', '')}"}),
}


@pytest.mark.parametrize("change", CASES.values(), ids=CASES.keys())
def test_characters_beyond_the_bmp_render_and_survive_the_yaml_output(change: Any) -> None:
    result = validate_deployment(_deployment(change))
    assert result.deployment is not None, result.problems
    objects = render_deployment(result.deployment, "ns")
    text = dump_documents(objects)
    assert [doc.content for doc in load_documents(text)] == objects
    assert ASTRAL.split()[0] in text


def test_the_value_arrives_unchanged_in_the_container() -> None:
    result = validate_deployment(_deployment(CASES["env value"]))
    assert result.deployment is not None
    pod = pod_templates(find(render_deployment(result.deployment, "ns"), "Deployment", "m-decode"))[0]
    assert env_of(pod["spec"]["containers"][0])["GREETING"] == ASTRAL


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(_JSON)
def test_the_templates_json_reads_back_as_the_same_value_with_both_yaml_loaders(value: Any) -> None:
    text = yaml_json(value)
    assert yaml.load(text, Loader=yaml.SafeLoader) == value
    assert yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) == value


@pytest.mark.parametrize("text", ["\\ud83d\\ude00", "\\\\ud83d\\ude00", "a\x7fb", "\x00\x1f\x85\u2028\ufeff\uffff"])
def test_backslashes_and_control_characters_are_kept_as_written(text: str) -> None:
    assert yaml.safe_load(yaml_json({"k": text})) == {"k": text}


def test_a_lone_surrogate_is_a_validation_problem_not_a_crash() -> None:
    document = _deployment(lambda s: s.update(engine={"env": [{"name": "X", "value": "half \ud83d"}]}))
    result = validate_deployment(copy.deepcopy(document))
    assert not result.ok
    assert [(p.path, p.message) for p in result.problems] == [
        ("spec.engine.env[0].value", "contains a lone UTF-16 surrogate")
    ]


def test_equal_values_give_the_same_text_whatever_order_their_keys_were_set_in() -> None:
    # The rendered text is a function of the value, not of the order the plan happened to build a mapping in, so
    # `disagg render` diffs only show real changes.
    assert yaml_json({"b": 1, "a": {"d": [2], "c": 3}}) == yaml_json({"a": {"c": 3, "d": [2]}, "b": 1})
