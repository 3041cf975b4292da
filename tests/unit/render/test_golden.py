"""Rendered output is deterministic and reviewed: every example has a golden file that must match byte for byte.

The golden files are a change detector, not the specification: what the rendered objects must do is asserted by
behavioural tests (tests/unit/render/test_wiring*.py, tests/unit/plan, tests/contract). A golden diff means
"something changed": find out what and why before accepting it, and if the change is a behaviour, give it a test of
its own so that regenerating the files can never be what keeps it."""

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
    assert golden.exists(), f"no golden file for {path.name}: run `make golden`, then read every object it wrote"
    assert dump_documents(rendered(path)) == golden.read_text(), (
        f"rendered output of {path.name} differs from tests/golden/{golden.name}. Do not just regenerate: check "
        "what changed and whether it is the behaviour you meant (`disagg render -n default -f "
        f"examples/{path.name} | diff tests/golden/{golden.name} -`). A changed behaviour needs its own assertion "
        "(tests/unit/render/test_wiring*.py, tests/unit/plan); only then run `make golden` and commit the diff"
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
