"""The renderer reads its templates' YAML with `read_yaml`, which builds strings, string-keyed maps and lists
itself and leaves every other node to PyYAML: it must return exactly what `yaml.load` with the same loader does,
for everything the templates render and for what they could (numbers, booleans, nulls, merge keys, anchors,
timestamps, keys that are not strings)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from disagg.render import renderer
from tests.conftest import EXAMPLES
from tests.support.rendering import example_deployment

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def rendered_texts() -> list[str]:
    texts: list[str] = []
    original = renderer._parsed

    def capture(text: str) -> Any:
        texts.append(text)
        return renderer.read_yaml(text)

    renderer._parsed = capture  # type: ignore[assignment]
    try:
        for path in EXAMPLES:
            renderer.render_deployment(example_deployment(path), "ns")
    finally:
        renderer._parsed = original
    return texts


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True would hide a wrong constructor)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_every_rendered_text_reads_as_pyyaml_reads_it() -> None:
    texts = rendered_texts()
    assert len(texts) > 100
    for text in texts:
        assert same(renderer.read_yaml(text), yaml.load(text, Loader=LOADER)), text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a: 1\nb: 1.5\nc: true\nd: null\ne: ~\nf: '1'\ng: \"x\"\nh: 0x1f\ni: 1_000\nj: 1:30\nk: yes\nl: .inf\n",
        "base: &b {x: 1, y: [a, 2]}\nmerged:\n  <<: *b\n  z: 3\nalias: *b\n",
        "when: 2026-01-01\nat: 2026-01-01T00:00:00Z\n",
        "1: one\n2.5: two\ntrue: three\n? [a, b]\n: four\n",
        "=: value\nnested: {=: other, s: [1, [2, {k: v}]]}\n",
        "dup: 1\ndup: 2\n",
        "- a\n- {b: c}\n- [d]\n- !!str 5\n- !!int '7'\n",
        "key: |\n  block\n  text\nfolded: >\n  a\n  b\n",
        # Maps and lists under other tags, whose keys are plain strings: PyYAML builds a set, an ordered map, pairs.
        "!!set {a, b}\n",
        # Keys that are scalars but not strings, alone in their map.
        "1: one\n2: two\n",
        "outer: {true: yes, 3.5: x}\n",
        "x: !!set {a: null}\n",
        "!!omap [{a: 1}, {b: 2}]\n",
        "y: !!pairs [{a: 1}, {a: 2}]\n",
    ],
)
def test_what_the_templates_do_not_produce_reads_as_pyyaml_reads_it(text: str) -> None:
    try:
        expected = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as error:
        with pytest.raises(type(error)):
            renderer.read_yaml(text)
        return
    assert same(renderer.read_yaml(text), expected)
