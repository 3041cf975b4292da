"""Kubernetes quantities and durations: parsing and formatting, with no I/O."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# The grammar of resource.Quantity in k8s.io/apimachinery (sign, digits, optional fraction, suffix or exponent).
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$"
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_RE = re.compile(DURATION_PATTERN)
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


class UnitError(ValueError):
    """A quantity or duration that does not parse."""


def is_quantity(value: int | str) -> bool:
    if isinstance(value, int):
        return True
    return bool(_QUANTITY_RE.fullmatch(value))


def parse_quantity(value: int | str) -> Decimal:
    """Return the quantity's value in base units (bytes for memory, cores for CPU)."""
    if isinstance(value, int):
        return Decimal(value)
    if not _QUANTITY_RE.fullmatch(value):  # fullmatch: `$` alone would accept a trailing newline
        raise UnitError(f"{value!r} is not a Kubernetes quantity such as 16Gi, 500m or 2")
    for suffix, factor in _BINARY_SUFFIXES.items():
        if value.endswith(suffix):
            return Decimal(value[: -len(suffix)]) * factor
    if re.search(r"[eE][+-]?[0-9]+\Z", value):
        try:
            return Decimal(value)
        except InvalidOperation as exc:  # pragma: no cover - the regex already matched
            raise UnitError(str(exc)) from exc
    suffix = value[-1] if value[-1:] in _DECIMAL_SUFFIXES and not value[-1].isdigit() else ""
    number = value[: -len(suffix)] if suffix else value
    return Decimal(number) * _DECIMAL_SUFFIXES[suffix]


def format_binary_quantity(amount: Decimal | int) -> str:
    """Format a byte count with the largest binary suffix that keeps it whole (e.g. 17179869184 -> 16Gi)."""
    whole = int(Decimal(amount).to_integral_value(rounding="ROUND_CEILING"))
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY_SUFFIXES[suffix]
        if whole and whole % factor == 0:
            return f"{whole // factor}{suffix}"
    return str(whole)


def parse_duration(value: str) -> Decimal:
    """Return a duration such as "1m30s" or "250ms" in seconds."""
    if not _DURATION_RE.fullmatch(value):
        raise UnitError(f"{value!r} is not a duration such as 500ms, 30s, 5m or 1h")
    return sum(
        (Decimal(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART_RE.findall(value)),
        Decimal(0),
    )
