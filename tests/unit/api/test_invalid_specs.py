"""Bad specs kept as files: each must be refused with its field path and a fix, and by CEL where a rule exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from disagg.api.documents import load_documents
from disagg.cli import cli
from tests.conftest import INVALID
from tests.support.crdschema import apply_defaults, cel_violations


def _headers(path: Path, key: str) -> list[str]:
    return re.findall(rf"^# {key}: (.*)$", path.read_text(), re.MULTILINE)


def test_at_least_25_distinct_bad_specs_are_kept() -> None:
    assert len(INVALID) >= 25
    assert all(_headers(path, "expect") for path in INVALID)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_validate_refuses_with_path_and_fix(path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    for expected in _headers(path, "expect"):
        assert expected in result.output
    problem_lines = [line for line in result.output.splitlines() if line.startswith("  - ")]
    assert all("Fix: " in line for line in problem_lines), result.output


@pytest.mark.parametrize("path", [p for p in INVALID if _headers(p, "cel")], ids=lambda p: p.stem)
def test_api_server_rules_refuse_it_too(path: Path, resource_schema: dict[str, Any]) -> None:
    document = load_documents(path.read_text())[0].content
    violations = list(cel_violations(resource_schema, apply_defaults(resource_schema, document)))
    expected_path = _headers(path, "cel")[0]
    assert any(found.startswith(expected_path) for found, _ in violations), violations
