"""Status of a DisaggDeployment from what its children report. Pure: the clock comes in as `now`.

Honesty rules: Ready only when every pool has all desired replicas ready on the current revision and the router
(and render tier and KV store, when present) serves; Degraded, with the reason, when something that worked stops
working or cannot be created; Progressing while a rollout or scale-up is still under way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from disagg.api.errors import Problem
from disagg.plan.model import DeploymentPlan, WorkloadPlan

from .children import ChildKey, WorkloadProgress, pod_problems, workload_progress
from .conditions import ConditionUpdate, Transition, apply_conditions

MAX_MESSAGE = 2000


@dataclass(frozen=True)
class StatusInputs:
    """Everything one reconcile learned, handed to the pure status computation."""

    generation: int | None
    previous: dict[str, Any]
    now: str
    problems: list[Problem] = field(default_factory=list)
    plan: DeploymentPlan | None = None
    live: dict[ChildKey, dict[str, Any]] = field(default_factory=dict)
    apply_errors: list[str] = field(default_factory=list)
    missing_apis: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    """Children whose names are taken by objects that are not ours (nothing was applied)."""
    pods: list[dict[str, Any]] = field(default_factory=list)
    scaling_condition: ConditionUpdate | None = None
    last_scale: dict[str, tuple[str, str]] = field(default_factory=dict)
    """pool -> (lastScaleTime, lastScaleReason) when the scaler changed the pool in this pass."""
    serving_mode: str = "Off"
    """Enforce: Ready requires Serving; Report: Serving is reported only; Off: no check."""
    serving_condition: ConditionUpdate | None = None
    """The Serving condition from a check round in this pass; None keeps the previous one."""
    serving_status: dict[str, Any] | None = None
    serving_engines: dict[str, int] | None = None
    """pool -> engines with a passing pair, from this pass's round."""
    rollout: dict[str, Any] | None = None
    serving_degraded: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class StatusReport:
    status: dict[str, Any]
    transitions: list[Transition]

    @property
    def phase(self) -> str:
        return str(self.status.get("phase"))


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def compute_status(inputs: StatusInputs) -> StatusReport:
    if inputs.plan is None:
        return _invalid_status(inputs)
    return _valid_status(inputs, inputs.plan)


def _invalid_status(inputs: StatusInputs) -> StatusReport:
    # Children are left exactly as they were, so the other conditions keep describing them.
    message = "; ".join(str(problem) for problem in inputs.problems)
    conditions, transitions = apply_conditions(
        inputs.previous.get("conditions") or [],
        [ConditionUpdate("SpecValid", "False", "InvalidSpec", _truncate(message))],
        inputs.generation,
        inputs.now,
    )
    status = {
        **inputs.previous,
        "observedGeneration": inputs.generation,
        "phase": "Invalid",
        "conditions": conditions,
    }
    return StatusReport(status, transitions)


def failed_pass_status(
    previous: dict[str, Any], generation: int | None, now: str, message: str, reason: str = "ReconcileFailed"
) -> StatusReport:
    """A pass that keeps failing before it reaches the status step says so (Degraded, ReconcileFailed) instead of
    leaving the last status, or none, in place; so does one that cannot run (AccessDenied, D151).
    observedGeneration stays: this generation was not reconciled."""
    conditions, transitions = apply_conditions(
        previous.get("conditions") or [],
        [ConditionUpdate("Degraded", "True", reason, _truncate(message))],
        generation,
        now,
    )
    return StatusReport({**previous, "phase": "Degraded", "conditions": conditions}, transitions)


@dataclass(frozen=True)
class _Component:
    name: str
    progress: WorkloadProgress | None
    desired: int
    problems: tuple[str, ...] = ()


def _component(
    plan_workload: WorkloadPlan, live: dict[ChildKey, dict[str, Any]], problems: dict[str, list[str]]
) -> _Component:
    obj = live.get((plan_workload.kind, plan_workload.name))
    progress = workload_progress(obj)
    counted_by_cluster = plan_workload.replicas_owned_elsewhere or plan_workload.kind == "DaemonSet"
    desired = progress.desired if progress and counted_by_cluster else plan_workload.replicas
    return _Component(plan_workload.role, progress, desired, tuple(problems.get(plan_workload.role, [])))


def _settled(component: _Component) -> bool:
    progress = component.progress
    return (
        progress is not None
        and component.desired > 0
        and progress.current_generation
        and progress.ready >= component.desired
        and progress.updated >= component.desired
    )


def _describe(component: _Component) -> str:
    progress = component.progress
    if progress is None:
        return f"{component.name}: not created yet"
    text = f"{component.name}: {progress.ready}/{component.desired} ready"
    if progress.updated < component.desired:
        text += f", {progress.updated} updated"
    if component.problems and progress.ready < component.desired:
        text += f" ({component.problems[0]}"
        text += f"; and {len(component.problems) - 1} more)" if len(component.problems) > 1 else ")"
    return text


def _valid_status(inputs: StatusInputs, plan: DeploymentPlan) -> StatusReport:
    problems = pod_problems(inputs.pods)
    components = {workload.role: _component(workload, inputs.live, problems) for workload in plan.workloads}
    previous = inputs.previous
    degraded: list[tuple[str, str]] = []
    if inputs.conflicts:
        degraded.append(("NameConflict", "; ".join(inputs.conflicts)))
    if inputs.missing_apis:
        degraded.append(("ApiMissing", "; ".join(inputs.missing_apis)))
    if inputs.apply_errors:
        degraded.append(("ApplyFailed", "; ".join(inputs.apply_errors)))
    for component in components.values():
        if component.progress is not None and component.progress.stuck_reason:
            degraded.append(("RolloutStuck", f"{component.name}: {component.progress.stuck_reason}"))
        lost = _lost_pods(component, previous)
        if lost:
            degraded.append(("PoolLostPods", lost))
    for role in ("prefill", "decode"):
        if role in components and components[role].desired == 0:
            degraded.append(("PoolScaledToZero", f"{role} has 0 replicas, so requests cannot be served"))
    serving = _serving_condition(inputs)
    enforce = inputs.serving_mode == "Enforce"
    if enforce:
        degraded += inputs.serving_degraded
        lost = _serving_lost(serving, previous)
        if lost:
            degraded.append(("ServingFailed", lost))

    unsettled = [component for component in components.values() if not _settled(component)]
    not_serving = enforce and (serving is None or serving.status != "True")
    ready = not unsettled and not degraded and not not_serving
    updates = [ConditionUpdate("SpecValid", "True", "Valid", "spec passed validation")]
    if serving is not None:
        updates.append(serving)
    if ready:
        summary = ", ".join(_describe(component) for component in components.values())
        if enforce and serving is not None:
            summary += f"; serving: {serving.message}"
        updates.append(ConditionUpdate("Ready", "True", "AllReady", _truncate(summary)))
    elif not unsettled and not degraded:
        why = f"Serving is {serving.status}: {serving.message}" if serving is not None else "no serving check ran"
        updates.append(ConditionUpdate("Ready", "False", "NotServing", _truncate(why)))
    else:
        waiting = "; ".join(_describe(component) for component in unsettled) or "see Degraded"
        updates.append(
            ConditionUpdate("Ready", "False", degraded[0][0] if degraded else "NotReady", _truncate(waiting))
        )
    if unsettled and not (degraded and all(c.progress is not None and c.progress.stuck_reason for c in unsettled)):
        reason = "PodsNotRunning" if any(c.problems for c in unsettled) else "Reconciling"
        message = _truncate("; ".join(_describe(c) for c in unsettled))
        updates.append(ConditionUpdate("Progressing", "True", reason, message))
    else:
        updates.append(ConditionUpdate("Progressing", "False", "Settled", "nothing is rolling out or scaling"))
    if degraded:
        reasons = sorted({reason for reason, _ in degraded}, key=[r for r, _ in degraded].index)
        updates.append(
            ConditionUpdate("Degraded", "True", reasons[0], _truncate("; ".join(message for _, message in degraded)))
        )
    else:
        updates.append(ConditionUpdate("Degraded", "False", "Healthy", "no failures observed"))
    if inputs.scaling_condition is not None:
        updates.append(inputs.scaling_condition)

    kept = previous.get("conditions") or []
    if not any(workload.replicas_owned_elsewhere for workload in plan.workloads):
        # Nothing is autoscaled (any more): a ScalingActive condition would describe a scaler that no longer runs.
        kept = [condition for condition in kept if condition.get("type") != "ScalingActive"]
    conditions, transitions = apply_conditions(kept, updates, inputs.generation, inputs.now)
    if degraded:
        phase = "Degraded"
    elif ready:
        phase = "Ready"
    elif all(c.progress is None or c.progress.ready == 0 for c in components.values()):
        phase = "Pending"
    else:
        phase = "Progressing"

    status: dict[str, Any] = {
        "observedGeneration": inputs.generation,
        "phase": phase,
        "conditions": conditions,
        "endpoint": plan.endpoint,
        "modelFamily": plan.family,
        "pairingRevision": plan.pairing.revision,
        "pairingGeneration": plan.pairing.generation,
    }
    for role in ("prefill", "decode"):
        component = components[role]
        status[role] = _pool_status(component, previous.get(role) or {}, inputs.last_scale.get(role))
        status[f"{role}Ready"] = f"{component.progress.ready if component.progress else 0}/{component.desired}"
        if inputs.serving_mode == "Off":
            continue
        if inputs.serving_engines is not None:
            status[role]["servingReplicas"] = inputs.serving_engines.get(role, 0)
        elif (previous.get(role) or {}).get("servingReplicas") is not None:
            status[role]["servingReplicas"] = previous[role]["servingReplicas"]
    for role, key in (("router", "router"), ("render", "render"), ("kv-store", "kvStore"), ("kv-node", "kvNode")):
        if role in components:
            status[key] = _component_status(components[role])
    serving_status = inputs.serving_status if inputs.serving_status is not None else previous.get("serving")
    if serving_status:
        status["serving"] = serving_status
    rollout = inputs.rollout if inputs.rollout is not None else previous.get("rollout")
    if rollout and inputs.serving_mode != "Off":
        status["rollout"] = rollout
    return StatusReport(status, transitions)


def _serving_condition(inputs: StatusInputs) -> ConditionUpdate | None:
    """This pass's Serving condition, or the one the previous status holds (no round was due). None without a
    serving check at all (a reconciler built without one, as in some in-process tests)."""
    if inputs.serving_condition is not None:
        return inputs.serving_condition
    if inputs.serving_mode == "Off":
        return None
    for condition in inputs.previous.get("conditions") or []:
        if condition.get("type") == "Serving":
            return ConditionUpdate(
                "Serving", condition.get("status", "Unknown"), condition.get("reason", ""), condition.get("message", "")
            )
    return ConditionUpdate("Serving", "Unknown", "NotChecked", "no serving check has run yet")


SERVING_LOST = "the deployment served and no longer does:"


def _serving_lost(serving: ConditionUpdate | None, previous: dict[str, Any]) -> str | None:
    """Serving that was True and is False now is something that stopped working: Degraded until it serves again."""
    if serving is None or serving.status != "False":
        return None
    conditions: list[dict[str, Any]] = previous.get("conditions") or []
    was: dict[str, Any] = next((c for c in conditions if c.get("type") == "Serving"), {})
    degraded: dict[str, Any] = next((c for c in conditions if c.get("type") == "Degraded"), {})
    # Degraded's reason names only its first cause; its message joins every cause's message, so a lost-serving
    # cause behind another one is found by its own words.
    if was.get("status") == "True" or (
        degraded.get("status") == "True"
        and (degraded.get("reason") == "ServingFailed" or SERVING_LOST in str(degraded.get("message", "")))
    ):
        return f"{SERVING_LOST} {serving.message}"
    return None


def _pool_status(
    component: _Component, previous: dict[str, Any], scaled: tuple[str, str] | None = None
) -> dict[str, Any]:
    progress = component.progress
    pool: dict[str, Any] = {
        "replicas": progress.replicas if progress else 0,
        "readyReplicas": progress.ready if progress else 0,
        "updatedReplicas": progress.updated if progress else 0,
        "desiredReplicas": component.desired,
    }
    if scaled is not None:
        pool["lastScaleTime"], pool["lastScaleReason"] = scaled
    else:
        for kept in ("lastScaleTime", "lastScaleReason"):
            if previous.get(kept):
                pool[kept] = previous[kept]
    return pool


def _component_status(component: _Component) -> dict[str, Any]:
    progress = component.progress
    return {
        "replicas": progress.replicas if progress else 0,
        "readyReplicas": progress.ready if progress else 0,
        "ready": _settled(component),
    }


_STATUS_KEY = {
    "prefill": "prefill",
    "decode": "decode",
    "router": "router",
    "render": "render",
    "kv-store": "kvStore",
    "kv-node": "kvNode",
}


def _lost_pods(component: _Component, previous: dict[str, Any]) -> str | None:
    """Something that had every replica ready, with the same target, has fewer now while all its pods are of the
    current revision (so it is not rolling out): pods were lost (node failure, eviction, crash), which is Degraded
    rather than Progressing. It stays Degraded until the pool is whole again, even through the moment a
    replacement pod is created."""
    progress = component.progress
    key = _STATUS_KEY.get(component.name)
    if progress is None or key is None or progress.ready >= component.desired or not progress.current_generation:
        return None
    if progress.replicas != progress.updated:
        return None  # pods of an older revision exist: a rollout, reported as Progressing
    before = previous.get(key) or {}
    was_ready = int(before.get("readyReplicas", 0))
    if key in ("prefill", "decode"):
        was_full = was_ready >= max(int(before.get("desiredReplicas", 0)), 1)
        same_target = int(before.get("desiredReplicas", -1)) == component.desired
    else:
        was_full, same_target = bool(before.get("ready")), was_ready >= component.desired
    still_lost = _reported_lost(previous, component.name)
    if (was_full and same_target) or still_lost:
        had = f"had {was_ready}" if not still_lost else "still short"
        return f"{component.name} has {progress.ready}/{component.desired} ready replicas ({had})"
    return None


def _reported_lost(previous: dict[str, Any], name: str) -> bool:
    """Whether the previous status already reported this component as having lost pods."""
    for condition in previous.get("conditions") or []:
        if (
            condition.get("type") == "Degraded"
            and condition.get("status") == "True"
            and f"{name} has " in str(condition.get("message", ""))
        ):
            return True
    return False
