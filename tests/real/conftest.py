"""Engines on the host take the same machine-wide slot as engines in pods (e2e/realnode_support.engines_turn):
vLLM CPU engines need a core each, and several worktrees and sessions share this machine's two."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e.realnode_support import engines_turn


@pytest.fixture(autouse=True)
def _one_set_of_engines_at_a_time() -> Iterator[None]:
    with engines_turn():
        yield
