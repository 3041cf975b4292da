"""Which API requests go first: those of a pass of the change lane (D245).

A contextvar, not a parameter: the pass does not know the transport, and the tasks it starts (children applied
concurrently) inherit their creator's context, so every request of the pass carries the mark without being told.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

URGENT: contextvars.ContextVar[bool] = contextvars.ContextVar("disagg_urgent_requests", default=False)
"""Whether the requests made in this context (a pass and the tasks it starts) go ahead of the others (D245)."""


@contextlib.contextmanager
def urgent_requests(urgent: bool = True) -> Iterator[None]:
    """Mark the requests made inside (and in tasks started inside) as urgent: a pass of the change lane."""
    token = URGENT.set(urgent)
    try:
        yield
    finally:
        URGENT.reset(token)
