"""Edges of a pass's bookkeeping where a wrong value would pass silently: when a taken-over scaler evaluates
next, what a rollback record without a revision holds, the Created event's type, and a first-wave name whose
holder cannot be read after its create-only apply was refused."""

from __future__ import annotations

from disagg.reconcile import scaler_memory
from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.kube import Kube
from disagg.reconcile.reconciler import held_revision
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness
from tests.unit.reconcile.test_pass_create_only import Racing, foreign_service
from tests.unit.reconcile.test_scaler_memory import learned


def test_a_taken_over_scaler_evaluates_next_an_interval_after_the_previous_leaders_evaluation() -> None:
    autoscaler = Autoscaler(Kube(FakeApiServer(namespaces=(NAMESPACE,))), wall_clock=lambda: 1000.0)
    text = scaler_memory.encode(scaler_memory.Memory(learned(), evaluated_at=990.0))
    autoscaler.restore(("ns", "m"), text, interval=30.0)
    assert autoscaler.next_due[("ns", "m")] == 1020.0
    assert autoscaler.evaluated_at[("ns", "m")] == 990.0
    # A memory of its own is kept: a second restore (the status written by itself) changes nothing.
    later = scaler_memory.encode(scaler_memory.Memory(learned(), evaluated_at=2000.0))
    autoscaler.restore(("ns", "m"), later, interval=30.0)
    assert autoscaler.next_due[("ns", "m")] == 1020.0


def test_a_rollback_record_holds_only_its_own_generation_and_only_with_a_revision() -> None:
    record = {"rollout": {"rolledBackGeneration": 3, "rolledBackTo": "abc"}}
    assert held_revision(record, 3) == "abc"
    assert held_revision(record, 4) is None  # the spec changed since: a new rollout
    assert held_revision(record, None) is None
    assert held_revision({"rollout": {"rolledBackGeneration": 3}}, 3) is None  # no revision: nothing to hold at
    assert held_revision({}, 3) is None


async def test_creating_children_is_a_normal_event_naming_them() -> None:
    h = harness(deployment_document(MINIMAL))
    assert await h.reconcile() == "ok"
    created = h.events("Created")
    assert [e["type"] for e in created] == ["Normal"]
    assert created[0]["message"].startswith("created ")
    assert "Deployment m-decode" in created[0]["message"]


async def test_a_taken_first_wave_name_whose_holder_cannot_be_read_is_not_written() -> None:
    """The create-only apply of Service m is refused (someone put an object there since the cache saw it free), and
    reading it to claim it is forbidden: whose it is stays unknown, so nothing is written to it and status says why."""
    server = Racing()
    server.before_create[("Service", "m")] = (foreign_service(), "payments-team")
    server.fail(403, 'services "m" is forbidden', method="GET", kind="Service", name="m", times=None)
    h = harness(deployment_document(MINIMAL), server)
    await h.reconcile()
    service = server.get("Service", NAMESPACE, "m")
    assert service is not None
    assert service["metadata"]["labels"] == {"team": "payments"} and "ownerReferences" not in service["metadata"]
    assert [e["manager"] for e in service["metadata"]["managedFields"]] == ["payments-team"]
    degraded = h.condition("Degraded")
    assert degraded["status"] == "True"
    assert "reading Service/m: 403" in degraded["message"] and 'services "m" is forbidden' in degraded["message"]
