"""Kubernetes-style conditions: set a condition, keeping lastTransitionTime unless the status really changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CONDITION_TYPES = ("Ready", "Serving", "Progressing", "Degraded", "SpecValid", "ScalingActive")
Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class ConditionUpdate:
    type: str
    status: Status
    reason: str
    message: str


@dataclass(frozen=True)
class Transition:
    """A condition whose status changed: the reconciler turns these into Kubernetes events."""

    type: str
    old: str | None
    new: Status
    reason: str
    message: str


def apply_conditions(
    previous: list[dict[str, Any]], updates: list[ConditionUpdate], generation: int | None, now: str
) -> tuple[list[dict[str, Any]], list[Transition]]:
    """New condition list (in CONDITION_TYPES order) and the transitions it implies.

    lastTransitionTime moves only when the status flips, so `kubectl describe` shows how long a state has held.
    Conditions not updated this time are kept as they were.
    """
    by_type = {condition.get("type"): condition for condition in previous if isinstance(condition, dict)}
    transitions = []
    for update in updates:
        old = by_type.get(update.type)
        old_status = old.get("status") if old else None
        changed = old_status != update.status
        by_type[update.type] = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": now if changed or not old else old.get("lastTransitionTime", now),
            "observedGeneration": generation,
        }
        if changed:
            transitions.append(Transition(update.type, old_status, update.status, update.reason, update.message))
    ordered = [by_type[kind] for kind in CONDITION_TYPES if kind in by_type]
    ordered += [condition for kind, condition in by_type.items() if kind not in CONDITION_TYPES]
    return ordered, transitions
