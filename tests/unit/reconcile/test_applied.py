"""The memory of what was applied (D121): which re-applies a pass may skip, and which changes to a live child make it
apply again. Each case changes one thing the docstring of `disagg.reconcile.applied` names."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from disagg.reconcile.applied import AppliedMemo, SentKeys, digest

OWNER = ("ns", "dd")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def workload(version: str = "1", generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "dd-decode",
            "resourceVersion": version,
            "generation": generation,
            "labels": {"disagg.dev/role": "decode"},
            "annotations": {"a": "1"},
            "ownerReferences": [{"kind": "DisaggDeployment", "name": "dd", "uid": "u", "controller": True}],
        },
        "spec": {"replicas": 2},
    }


SENT_KEYS = SentKeys.of(workload())
"""The keys the operator sent: those of `workload()` (a label and an annotation)."""


def memo_with(kind: str, applied: dict[str, Any]) -> tuple[AppliedMemo, Clock, str]:
    clock = Clock()
    memo = AppliedMemo(reapply_seconds=300.0, clock=clock)
    sent = digest(applied["spec"])
    memo.record(OWNER, kind, "dd-decode", sent, applied, SENT_KEYS)
    return memo, clock, sent


def test_the_version_the_apply_returned_needs_no_new_apply() -> None:
    memo, _, sent = memo_with("Deployment", workload())
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", digest({"replicas": 3}), workload())
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", sent, None)
    assert not memo.unchanged(OWNER, "Deployment", "other", sent, workload())


def test_a_workload_whose_controller_wrote_only_its_status_is_not_applied_again() -> None:
    memo, _, sent = memo_with("Deployment", workload())
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload(version="2"))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda m: m.update(generation=2), id="spec changed (generation)"),
        pytest.param(lambda m: m["labels"].update({"disagg.dev/role": "prefill"}), id="our label's value"),
        pytest.param(lambda m: m["labels"].pop("disagg.dev/role"), id="our label removed"),
        pytest.param(lambda m: m["annotations"].pop("a"), id="our annotation removed"),
        pytest.param(lambda m: m.update(annotations=None), id="every annotation removed"),
        pytest.param(lambda m: m.pop("ownerReferences"), id="owner references"),
    ],
)
def test_a_new_version_that_changed_more_than_status_is_drift_to_repair(change: Any) -> None:
    memo, _, sent = memo_with("Deployment", workload())
    live = copy.deepcopy(workload(version="2"))
    change(live["metadata"])
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", sent, live)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda m: m["annotations"].update({"deployment.kubernetes.io/revision": "1"}),
            id="the Deployment controller's revision annotation",
        ),
        pytest.param(lambda m: m["labels"].update(team="ml"), id="someone else's label"),
    ],
)
def test_a_workload_gaining_keys_the_operator_does_not_send_is_not_applied_again(change: Any) -> None:
    """An apply would not touch another manager's keys, so they are no drift to repair (D251): the Deployment
    controller's revision annotation used to cost every new Deployment a second apply and a status write."""
    memo, _, sent = memo_with("Deployment", workload())
    live = copy.deepcopy(workload(version="2"))
    change(live["metadata"])
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, live)


def test_any_new_version_of_a_kind_without_a_controller_status_is_drift() -> None:
    memo, _, sent = memo_with("ConfigMap", workload())
    assert memo.unchanged(OWNER, "ConfigMap", "dd-decode", sent, workload())
    assert not memo.unchanged(OWNER, "ConfigMap", "dd-decode", sent, workload(version="2"))


def test_everything_is_applied_again_once_the_reapply_period_has_passed() -> None:
    memo, clock, sent = memo_with("Deployment", workload())
    clock.now += 0.89 * 300.0  # the period is spread by +-10%, never below 0.9 of it
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())
    clock.now += 0.22 * 300.0
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())


def test_dropping_a_child_or_an_owner_forgets_it() -> None:
    memo, _, sent = memo_with("Deployment", workload())
    memo.record(OWNER, "Service", "dd", sent, workload(), SENT_KEYS)
    memo.drop(OWNER, "Deployment", "dd-decode")
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())
    assert memo.unchanged(OWNER, "Service", "dd", sent, workload())
    memo.drop(OWNER)
    assert not memo.unchanged(OWNER, "Service", "dd", sent, workload())
    memo.record(OWNER, "Service", "dd", sent, workload(), SENT_KEYS)
    memo.clear()
    assert not memo.unchanged(OWNER, "Service", "dd", sent, workload())


def test_dropping_a_child_of_an_owner_with_nothing_recorded_is_a_no_op() -> None:
    """A pass prunes a child even when none of its applies succeeded (a fresh replica whose every apply was
    refused): nothing is recorded for that DisaggDeployment, and forgetting its child must not fail the pass."""
    memo, _, sent = memo_with("Deployment", workload())
    memo.drop(("ns", "other"), "Deployment", "other-decode")
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())


def test_a_child_is_due_again_at_its_reapply_time_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("disagg.reconcile.applied.random.uniform", lambda low, high: 1.0)  # no spread
    memo, clock, sent = memo_with("Deployment", workload())
    start = clock.now
    clock.now = start + 299.5
    assert memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())
    clock.now = start + 300.0
    assert not memo.unchanged(OWNER, "Deployment", "dd-decode", sent, workload())
