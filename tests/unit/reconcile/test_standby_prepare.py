"""A standby renders ahead what it would reconcile after a takeover (D193), and its first passes then render nothing;
together with the applied digest (D192) a takeover's first pass of a settled DisaggDeployment writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from disagg.api.validate import ValidationResult
from disagg.plan.model import Installation
from disagg.reconcile.rendered import Core, CoreMemo, compute
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness, reconciler_for


class Counting:
    def __init__(self) -> None:
        self.rendered: list[str] = []

    def __call__(self, owner: dict[str, Any], namespace: str, installation: Installation) -> Core | ValidationResult:
        self.rendered.append(owner["metadata"]["name"])
        return compute(owner, namespace, installation)


async def standby_over(h: Harness) -> tuple[Harness, Counting]:
    """A second replica over the same cluster, standing by with warm caches and every DisaggDeployment known (as
    kopf's watch makes it on a standby)."""
    counting = Counting()
    standby = reconciler_for(h.server, instance="op-b")
    standby.cores = CoreMemo(counting, installation=standby.installation)
    await standby.watching.caught_up()
    for obj in h.server.objects("DisaggDeployment", NAMESPACE):
        standby.known.add((NAMESPACE, obj["metadata"]["name"]))
    return Harness(h.server, standby, h.name), counting


async def prepared(h: Harness, counting: Counting, names: set[str]) -> None:
    task = asyncio.create_task(h.reconciler.prepare(pause=0.01))
    try:
        async with asyncio.timeout(10):
            while not names <= set(counting.rendered):
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_standby_renders_every_known_deployment_and_its_first_pass_renders_nothing() -> None:
    leader = harness(deployment_document(MINIMAL))
    leader.server.create(deployment_document(MINIMAL, name="other"), manager="kubectl")
    await leader.reconcile()
    leader.settle()
    await leader.reconcile()
    standby, counting = await standby_over(leader)
    await prepared(standby, counting, {"m", "other"})
    assert sorted(counting.rendered) == ["m", "other"]
    writes = leader.server.writes
    assert await standby.reconcile() == "ok"  # the takeover's first pass
    assert sorted(counting.rendered) == ["m", "other"]  # rendered ahead, not again
    assert leader.server.writes == writes  # and, the children being as the status says (D192), nothing written


async def test_a_spec_changed_while_standing_by_is_rendered_again_once() -> None:
    leader = harness(deployment_document(MINIMAL))
    await leader.reconcile()
    standby, counting = await standby_over(leader)
    await prepared(standby, counting, {"m"})
    leader.edit_spec(lambda spec: spec["prefill"].update(replicas=5))
    await standby.reconciler.watching.caught_up()
    counting.rendered.clear()
    await prepared(standby, counting, {"m"})
    await leader.reconcile()  # the leader's status write is a new version too, but the spec is the same
    await standby.reconciler.watching.caught_up()
    task = asyncio.create_task(standby.reconciler.prepare(pause=0.01))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert counting.rendered == ["m"]


async def test_a_standby_does_not_read_a_deployment_again_for_a_status_write(monkeypatch: Any) -> None:
    """The leader writes every DisaggDeployment's status after each pass that changes it; the standby reads (decodes
    and digests) a DisaggDeployment again only when what renders could have changed (D249)."""
    leader = harness(deployment_document(MINIMAL))
    await leader.reconcile()
    standby, counting = await standby_over(leader)
    reads: list[str] = []
    get = standby.reconciler.cache.get

    def counted(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "DisaggDeployment":
            reads.append(name)
        return get(kind, namespace, name)

    monkeypatch.setattr(standby.reconciler.cache, "get", counted)
    task = asyncio.create_task(standby.reconciler.prepare(pause=0.01))
    try:
        async with asyncio.timeout(10):
            while reads != ["m"]:
                await asyncio.sleep(0.01)
            leader.server.set_status("DisaggDeployment", NAMESPACE, "m", {**leader.status, "phase": "Other"})
            await standby.reconciler.watching.caught_up()
            await asyncio.sleep(0.1)  # several rounds of prepare
            assert reads == ["m"]
            leader.edit_spec(lambda spec: spec["prefill"].update(replicas=3))
            await standby.reconciler.watching.caught_up()
            while reads != ["m", "m"]:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert counting.rendered == ["m", "m"]
