"""Shared fixtures: repository paths and the generated CRD schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from disagg.api.crd import custom_resource_definition

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
INVALID = sorted((REPO / "tests" / "data" / "invalid").glob("*.yaml"))


@pytest.fixture(scope="session")
def crd() -> dict[str, Any]:
    return custom_resource_definition()


@pytest.fixture(scope="session")
def resource_schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema
