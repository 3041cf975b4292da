"""Malformed scalars are validation problems, never exceptions (D73). Regression: a quantity with a trailing
newline (`memory: |` then `16Gi`) passed the quantity pattern (Python's `$` matches before a final newline) and
then crashed with decimal.InvalidOperation; a duration with one was accepted though the API server's pattern
refuses it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from disagg.api.units import UnitError, is_quantity, parse_duration, parse_quantity
from disagg.api.validate import validate_deployment
from tests.support.reconciling import MINIMAL


def _with(change: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(MINIMAL)
    change(document["spec"])
    return document


BLOCK_SCALAR = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: m}
spec:
  model: {name: org/model}
  decode:
    resources:
      memory: |
        16Gi
"""


def test_a_block_scalar_quantity_is_reported_with_its_path() -> None:
    result = validate_deployment(yaml.safe_load(BLOCK_SCALAR))
    assert not result.ok
    assert [p.path for p in result.problems] == ["spec.decode.resources.memory"]
    assert "is not a Kubernetes quantity" in result.problems[0].message


@pytest.mark.parametrize("value", ["16Gi\n", "16Gi\n\n", "1e3\n", "500m\n", "\n16Gi", " 16Gi", "16 Gi"])
def test_quantities_must_be_the_whole_string(value: str) -> None:
    assert not is_quantity(value)
    with pytest.raises(UnitError):
        parse_quantity(value)
    result = validate_deployment(_with(lambda s: s["decode"].update(resources={"memory": value})))
    assert not result.ok and result.problems[0].path == "spec.decode.resources.memory"


@pytest.mark.parametrize("value", ["2s\n", "1m30s\n", "\n2s"])
def test_durations_must_be_the_whole_string(value: str) -> None:
    with pytest.raises(UnitError):
        parse_duration(value)
    result = validate_deployment(_with(lambda s: s.update(scaling={"interval": value})))
    assert not result.ok and result.problems[0].path == "spec.scaling.interval"


@pytest.mark.parametrize("value", ["16Gi", "1e3", "1E3", "500m", "0.5", ".5", "+1", "8"])
def test_well_formed_quantities_still_parse(value: str) -> None:
    assert is_quantity(value)
    parse_quantity(value)
