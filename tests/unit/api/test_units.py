from decimal import Decimal

import pytest

from disagg.api.units import UnitError, format_binary_quantity, parse_duration, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16Gi", 16 * 2**30),
        ("500m", Decimal("0.5")),
        ("2", 2),
        ("1.5G", Decimal("1.5e9")),
        ("1e3", 1000),
        ("100Ki", 102400),
        (8, 8),
        ("3E", Decimal("3e18")),
    ],
)
def test_quantities_parse_to_base_units(text: str | int, expected: Decimal | int) -> None:
    assert parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize("text", ["16GB", "1.2.3", "Gi", "", "ten"])
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(UnitError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_byte_counts_format_with_the_largest_whole_binary_suffix() -> None:
    assert format_binary_quantity(16 * 2**30) == "16Gi"
    assert format_binary_quantity(16 * 2**30 + 512 * 2**20) == "16896Mi"
    assert format_binary_quantity(1000) == "1000"


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("250ms", Decimal("0.25")), ("1m30s", 90), ("2h", 7200)])
def test_durations_parse_to_seconds(text: str, seconds: Decimal | int) -> None:
    assert parse_duration(text) == Decimal(seconds)


@pytest.mark.parametrize("text", ["30", "2 seconds", "1d", "-5s"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(UnitError):
        parse_duration(text)
