"""What the e2e tier does when something it needs is missing: fail in CI, skip with the reason elsewhere, so a
missing prerequisite never looks like a pass where it matters (CI sets `CI`)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Fail in CI, skip elsewhere: a missing prerequisite must never look like a pass."""
    if os.environ.get("CI"):
        pytest.fail(f"missing prerequisite (CI runs everything): {reason}")
    pytest.skip(reason)
