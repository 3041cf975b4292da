"""A rendered text is read back once (renderer._parsed); every render still returns objects of its own."""

from __future__ import annotations

from disagg.render import render_deployment
from tests.conftest import EXAMPLES
from tests.support.rendering import example_deployment


def test_renders_of_one_spec_are_equal_and_share_nothing() -> None:
    deployment = example_deployment(EXAMPLES[0])
    first = render_deployment(deployment, "ns")
    second = render_deployment(deployment, "ns")
    assert first == second
    first[-1]["metadata"]["labels"]["changed"] = "yes"
    first[-1]["spec"]["template"]["spec"]["containers"].clear()
    assert render_deployment(deployment, "ns") == second
    assert "changed" not in second[-1]["metadata"]["labels"]
