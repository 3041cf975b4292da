"""Which condition changes become Kubernetes Events, of which type and reason: what `kubectl describe dd` shows.
Only changes are reported, never a steady state."""

from __future__ import annotations

import pytest

from disagg.reconcile.conditions import Transition
from disagg.reconcile.events import Notice, event_object, notices_for


@pytest.mark.parametrize(
    ("condition", "old", "new", "expected"),
    [
        ("SpecValid", None, "False", ("Warning", "InvalidSpec", "the message")),
        ("SpecValid", "True", "False", ("Warning", "InvalidSpec", "the message")),
        ("SpecValid", "False", "True", ("Normal", "SpecValid", "the spec is valid again; reconciling")),
        ("SpecValid", None, "True", None),
        ("Ready", "False", "True", ("Normal", "Ready", "the message")),
        ("Ready", None, "True", ("Normal", "Ready", "the message")),
        ("Ready", "True", "False", ("Warning", "NotReady", "the message")),
        ("Ready", None, "False", None),
        ("Ready", "Unknown", "False", None),
        ("Serving", "False", "True", ("Normal", "Serving", "the message")),
        ("Serving", None, "False", None),
        ("Serving", None, "Unknown", None),
        ("Serving", "True", "False", ("Warning", "NotServing", "the message")),
        ("Serving", "Unknown", "False", ("Warning", "NotServing", "the message")),
        ("Serving", "True", "Unknown", ("Warning", "ServingUnknown", "the message")),
        ("Degraded", "False", "True", ("Warning", "TheReason", "the message")),
        ("Degraded", None, "True", ("Warning", "TheReason", "the message")),
        ("Degraded", "True", "False", ("Normal", "Recovered", "no longer degraded")),
        ("Degraded", None, "False", None),
        ("Progressing", "False", "True", None),
    ],
)
def test_a_condition_change_and_its_event(
    condition: str, old: str | None, new: str, expected: tuple[str, str, str] | None
) -> None:
    notices = notices_for([Transition(condition, old, new, "TheReason", "the message")])  # type: ignore[arg-type]
    assert notices == ([] if expected is None else [Notice(*expected)])  # type: ignore[arg-type]


def test_several_changes_give_their_events_in_order() -> None:
    transitions = [
        Transition("Ready", "True", "False", "PodsLost", "decode lost a pod"),
        Transition("Degraded", "False", "True", "PodsLost", "decode lost a pod"),
        Transition("SpecValid", "True", "True", "Valid", "ok"),
    ]
    assert [(n.type, n.reason) for n in notices_for(transitions)] == [("Warning", "NotReady"), ("Warning", "PodsLost")]


def test_the_event_names_its_object_and_the_reporting_operator() -> None:
    owner = {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u-1"},
    }
    event = event_object(owner, Notice("Warning", "NotReady", "x" * 2000), "2026-12-01T00:00:00Z", "pod-a")
    assert event["metadata"] == {"generateName": "m.", "namespace": "ns"}
    assert event["involvedObject"] == {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "name": "m",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "NotReady", "x" * 1024)
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-12-01T00:00:00Z" and event["count"] == 1
    assert event["source"] == {"component": "disagg-operator"}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("disagg.dev/disagg-operator", "pod-a")
