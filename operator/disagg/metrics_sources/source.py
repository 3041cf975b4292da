"""The one surface the autoscaler reads metrics through, whatever collects them."""

from __future__ import annotations

from typing import Any, Protocol

from disagg.scaling.snapshot import Observation


class ObservationSource(Protocol):
    """Fills an Observation of one DisaggDeployment's pools. Failures never raise: a pool that could not be read
    comes back as a MISSING or PARTIAL snapshot, and the policy holds it."""

    async def observe(
        self, namespace: str, name: str, pods: list[dict[str, Any]], now: float, window_s: float
    ) -> Observation:
        """Both pools over the window ending at `now`. `pods` are the deployment's pods (for ready/starting counts and
        addresses); `window_s` is the range a source that queries history uses (one that keeps its own previous
        sample measures the window between its samples instead)."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept for a deployment that is gone or no longer scaled."""
        ...

    async def close(self) -> None: ...
