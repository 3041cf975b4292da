"""A pass that would read exactly what the last successful one read is not run (D190): a settled DisaggDeployment's
resync costs no request and no rendering, while every change, a due re-apply and the clock-driven steps still get
their pass."""

from __future__ import annotations

from typing import Any

from disagg.reconcile import metrics
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness, reconciler_for
from tests.support.serving import checked_harness, create_pod, kubelet
from tests.unit.reconcile.test_pass_serving import FRONTEND


async def settled(h: Harness) -> None:
    """Passes until one writes nothing (the last one's writes are what the next one reads)."""
    for _ in range(5):
        writes = h.server.writes
        assert await h.reconcile() in ("ok", "unchanged")
        if h.server.writes == writes:
            return
    raise AssertionError("the DisaggDeployment never settled")


async def test_a_settled_deployment_s_pass_is_not_run_and_sends_nothing() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await settled(h)
    requests = len(h.server.requests)
    rendered = h.reconciler.cores._answers.copy()
    h.reconciler.cores._answers.clear()  # a pass that ran would render again
    assert await h.reconcile() == "unchanged"
    assert await h.reconcile() == "unchanged"
    assert [r for r in h.server.requests[requests:] if "watch" not in r.query] == []
    assert h.reconciler.cores._answers == {}
    h.reconciler.cores._answers.update(rendered)


async def test_a_child_edited_by_someone_else_ends_the_skip_and_is_repaired() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    await settled(h)
    assert await h.reconcile() == "unchanged"
    h.server.update("Deployment", NAMESPACE, "m-prefill", lambda d: d["spec"].update(replicas=7), manager="kubectl")
    assert await h.reconcile() == "ok"
    assert h.server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 2  # type: ignore[index]


async def test_a_deleted_child_and_a_spec_change_each_get_a_full_pass() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    await settled(h)
    h.server.remove("Service", NAMESPACE, "m-router")
    assert await h.reconcile() == "ok"
    assert ("Service", "m-router") in h.children()
    await settled(h)
    h.edit_spec(lambda spec: spec["prefill"].update(replicas=3))
    assert await h.reconcile() == "ok"
    assert h.server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 3  # type: ignore[index]
    assert h.status["observedGeneration"] == 2


async def test_a_status_the_pass_did_not_write_ends_the_skip() -> None:
    # Someone (another replica's late write, a user) changed status: the pass puts its own view back.
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    await settled(h)
    phase = h.status["phase"]
    h.server.set_status("DisaggDeployment", NAMESPACE, "m", {**h.status, "phase": "Bogus"})
    assert await h.reconcile() == "ok"
    assert h.status["phase"] == phase


async def test_a_due_re_apply_ends_the_skip() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    server.create(deployment_document(MINIMAL), manager="kubectl")
    h = Harness(server, reconciler_for(server, reapply_seconds=0.0), "m")  # every apply is due at once
    await h.reconcile()
    h.settle()
    await h.reconcile()
    await h.reconcile()
    applies = len([r for r in server.requests if r.method == "PATCH" and "fieldManager" in r.query])
    assert await h.reconcile() == "ok"
    assert len([r for r in server.requests if r.method == "PATCH" and "fieldManager" in r.query]) > applies


async def test_a_failed_pass_is_never_skipped() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(422, 'Service "m-router" is invalid', method="PATCH", kind="Service", name="m-router", times=None)
    assert await h.reconcile() == "retry"
    assert await h.reconcile() == "retry"
    assert await h.reconcile() == "retry"


async def test_after_a_takeover_every_deployment_gets_a_full_pass() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    await settled(h)
    h.reconciler.forget_writes()  # another replica may have written meanwhile (D123)
    assert await h.reconcile() == "ok"


async def test_the_serving_check_keeps_its_rounds_and_the_children_are_not_applied_again() -> None:
    h, frontend, clock = checked_harness(deployment_document(FRONTEND))
    await h.reconcile()
    for name, role in (("m-prefill-a", "prefill"), ("m-decode-a", "decode")):
        create_pod(h.server, "m", name, role, gated=True)
    create_pod(h.server, "m", "m-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    kubelet(h.server)
    await settled(h)
    rounds = len(frontend.probed)
    applies = len(applied(h.server))
    clock.now += 11  # the next round is due
    assert await h.reconcile() == "ok"  # not skipped: the check reads the clock
    assert len(frontend.probed) == rounds + 1
    assert len(applied(h.server)) == applies


def applied(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH" and r.query.get("fieldManager") == "disagg-operator"]


async def test_a_skipped_pass_counts_as_unchanged_in_the_pass_metric() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    await settled(h)
    before = unchanged_passes()
    await h.reconciler.process(h.key)
    assert unchanged_passes() == before + 1


def unchanged_passes() -> float:
    value = metrics.REGISTRY.get_sample_value("disagg_reconcile_duration_seconds_count", {"result": "unchanged"})
    return value or 0.0


async def test_the_phase_gauge_counts_each_deployment_once_as_phases_change() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    for name in ("a", "b"):
        server.create(deployment_document(MINIMAL, name=name), manager="kubectl")
    reconciler = reconciler_for(server)
    for name in ("a", "b"):
        await reconciler.reconcile((NAMESPACE, name))
    assert phase_gauge("Pending") == 2 and phase_gauge("Ready") == 0
    Harness(server, reconciler, "a").settle()
    for name in ("a", "b"):
        await reconciler.reconcile((NAMESPACE, name))
    assert phase_gauge("Pending") == 0 and phase_gauge("Ready") == 2
    reconciler.forget((NAMESPACE, "a"))
    assert phase_gauge("Ready") == 1


def phase_gauge(phase: str) -> float:
    return metrics.REGISTRY.get_sample_value("disagg_deployments", {"phase": phase}) or 0.0
