"""Kubernetes Event objects for what users should see in `kubectl describe dd`. Pure builders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .conditions import Transition

REPORTING_COMPONENT = "disagg-operator"


@dataclass(frozen=True)
class Notice:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def notices_for(transitions: list[Transition]) -> list[Notice]:
    """Turn condition transitions into events; only changes are reported, never steady state."""
    notices = []
    for change in transitions:
        if change.type == "SpecValid":
            if change.new == "False":
                notices.append(Notice("Warning", "InvalidSpec", change.message))
            elif change.old == "False":
                notices.append(Notice("Normal", "SpecValid", "the spec is valid again; reconciling"))
        elif change.type == "Ready":
            if change.new == "True":
                notices.append(Notice("Normal", "Ready", change.message))
            elif change.old == "True":
                notices.append(Notice("Warning", "NotReady", change.message))
        elif change.type == "Serving":
            if change.new == "True":
                notices.append(Notice("Normal", "Serving", change.message))
            elif change.old is None:
                pass  # a new DisaggDeployment that does not serve yet: Ready=False already says so
            elif change.new == "False":
                notices.append(Notice("Warning", "NotServing", change.message))
            else:
                notices.append(Notice("Warning", "ServingUnknown", change.message))
        elif change.type == "Degraded":
            if change.new == "True":
                notices.append(Notice("Warning", change.reason, change.message))
            elif change.old == "True":
                notices.append(Notice("Normal", "Recovered", "no longer degraded"))
    return notices


def event_object(owner: dict[str, Any], notice: Notice, now: str, instance: str) -> dict[str, Any]:
    metadata = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
        "involvedObject": {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
        },
        "type": notice.type,
        "reason": notice.reason,
        "message": notice.message[:1024],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": REPORTING_COMPONENT},
        "reportingComponent": f"disagg.dev/{REPORTING_COMPONENT}",
        "reportingInstance": instance,
    }
