"""Rendered output is deterministic and reviewed: every example has a golden file that must match byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.api.documents import dump_documents
from tests.conftest import EXAMPLES, REPO
from tests.support.rendering import rendered

GOLDEN = REPO / "tests" / "golden"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_render_matches_the_reviewed_golden_file(path: Path) -> None:
    golden = GOLDEN / f"{path.stem}.yaml"
    assert golden.exists(), f"no golden file for {path.name}: run `make golden` and review the diff"
    assert dump_documents(rendered(path)) == golden.read_text(), (
        f"rendered output of {path.name} changed: run `make golden`, review the diff, and commit it"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_render_is_byte_identical_across_runs(path: Path) -> None:
    from disagg.render import render_deployment
    from tests.support.rendering import example_deployment

    first = dump_documents(render_deployment(example_deployment(path), "default"))
    second = dump_documents(render_deployment(example_deployment(path), "default"))
    assert first == second


def test_no_stale_golden_files() -> None:
    stems = {path.stem for path in EXAMPLES}
    assert {path.stem for path in GOLDEN.glob("*.yaml")} <= stems
