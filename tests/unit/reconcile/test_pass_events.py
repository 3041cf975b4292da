"""How a pass posts its events: after the status they describe, all at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from disagg.reconcile.kube import KubeError
from tests.support.reconciling import MINIMAL, deployment_document, harness


def scaled_to_zero() -> dict[str, Any]:
    document = deployment_document(MINIMAL)
    document["spec"]["decode"]["replicas"] = 0
    return document


async def test_a_pass_s_events_are_posted_together_not_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new DisaggDeployment with a pool at 0 reports two events in its first pass (Created, PoolScaledToZero);
    each waits until both are in flight, which only concurrent posting reaches (one round trip per pass instead of
    one per event)."""
    h = harness(scaled_to_zero())
    in_flight: list[str] = []
    both = asyncio.Event()
    post = h.reconciler.kube.create_event

    async def create_event(namespace: str, event: dict[str, Any]) -> None:
        in_flight.append(event["reason"])
        if len(in_flight) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), timeout=5)
        await post(namespace, event)

    monkeypatch.setattr(h.reconciler.kube, "create_event", create_event)
    assert await h.reconcile() == "ok"
    assert len(in_flight) == 2 and "Created" in in_flight
    assert sorted(e["reason"] for e in h.events()) == sorted(in_flight)


async def test_an_event_the_api_server_refuses_does_not_fail_the_pass_or_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = harness(scaled_to_zero())
    post = h.reconciler.kube.create_event

    async def create_event(namespace: str, event: dict[str, Any]) -> None:
        if event["reason"] == "Created":
            raise KubeError(403, "Forbidden", "events is forbidden")
        await post(namespace, event)

    monkeypatch.setattr(h.reconciler.kube, "create_event", create_event)
    assert await h.reconcile() == "ok"
    assert h.events("Created") == [] and [e["reason"] for e in h.events()] == ["PoolScaledToZero"]
