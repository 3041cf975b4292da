"""The scaler's shell: collect metrics, call the pure policy, write replicas through the replicas field manager.

It runs inside a DisaggDeployment's reconcile pass (so status has one writer) whenever the pass falls due by
spec.scaling.interval; the reconciler re-queues scaled DisaggDeployments at that interval. What the policy learned
is kept in memory and, through the pass's status patch, in `status.scalerState` (`memory`/`restore`), so a new
leader or a restarted operator continues with it (D126).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.pool import PoolName
from disagg.api.resolve import operator_scales, pool_of
from disagg.api.units import parse_duration
from disagg.metrics_sources.direct import DirectSource
from disagg.metrics_sources.prometheus import PrometheusSource
from disagg.metrics_sources.source import ObservationSource
from disagg.plan.model import DeploymentPlan
from disagg.scaling.policy import Decision, PolicyConfig, PolicyState, config_from_spec, decide
from disagg.scaling.snapshot import Observation

from . import metrics, scaler_memory
from .children import REPLICAS_MANAGER, ChildKey
from .conditions import ConditionUpdate
from .events import Notice
from .kube import Kube
from .metrics_access import not_allowed_message, prometheus_allowed
from .ownership import replicas_patch
from .workqueue import Key

POOLS: tuple[PoolName, PoolName] = ("prefill", "decode")


@dataclass
class ScaleReport:
    """What this pass's scaling step changed, for status and events."""

    condition: ConditionUpdate | None = None
    last_scale: dict[str, tuple[str, str]] = field(default_factory=dict)
    """pool -> (lastScaleTime, lastScaleReason) for pools scaled in this pass."""
    notices: list[Notice] = field(default_factory=list)


def interval_seconds(spec: DisaggDeploymentSpec) -> float:
    """The evaluation interval, as the policy reads it (the one place it is parsed)."""
    return config_from_spec(spec).interval_s


def external_pools(spec: DisaggDeploymentSpec) -> list[PoolName]:
    return [p for p in POOLS if pool_of(spec, p).autoscaling.enabled and not operator_scales(pool_of(spec, p))]


def scaled_pools(spec: DisaggDeploymentSpec) -> list[PoolName]:
    return [p for p in POOLS if operator_scales(pool_of(spec, p))]


class Autoscaler:
    def __init__(
        self, kube: Kube, wall_clock: Callable[[], float] = time.time, allowed_prometheus: tuple[str, ...] = ()
    ) -> None:
        self.kube = kube
        self.allowed_prometheus = allowed_prometheus
        """Prometheus base URLs the install allows (D76); a spec naming any other gets no scaling."""
        self.wall_clock = wall_clock
        self.direct = DirectSource()
        self.prometheus: dict[str, PrometheusSource] = {}
        self.states: dict[Key, PolicyState] = {}
        self.configs: dict[Key, tuple[DisaggDeploymentSpec, PolicyConfig]] = {}
        """The policy's config per deployment, built once per spec and rebuilt only when the spec changes."""
        self.next_due: dict[Key, float] = {}
        self.evaluated_at: dict[Key, float] = {}

    async def close(self) -> None:
        await self.direct.close()
        for source in self.prometheus.values():
            await source.close()

    def forget(self, key: Key) -> None:
        self.states.pop(key, None)
        self.configs.pop(key, None)
        self.next_due.pop(key, None)
        self.evaluated_at.pop(key, None)
        sources: list[ObservationSource] = [self.direct, *self.prometheus.values()]
        for source in sources:
            source.forget(*key)

    def _config(self, key: Key, spec: DisaggDeploymentSpec) -> PolicyConfig:
        cached = self.configs.get(key)
        if cached is None or cached[0] != spec:
            cached = (spec, config_from_spec(spec))
            self.configs[key] = cached
        return cached[1]

    def reset(self) -> None:
        """Forget every learned state (this replica stopped leading; the next leader's is in status)."""
        for key in list(self.states):
            self.forget(key)

    def restore(self, key: Key, text: str | None, interval: float) -> None:
        """Take the state a previous leader (or this process before a restart) wrote to status, unless this process
        already has one of its own; the next evaluation falls due when it would have for the previous leader."""
        if key in self.states:
            return
        memory = scaler_memory.decode(text)
        if memory is None:
            return
        self.states[key] = memory.state
        self.evaluated_at[key] = memory.evaluated_at
        self.next_due[key] = memory.evaluated_at + interval

    def memory(self, key: Key) -> str | None:
        """The learned state as text for status, or None when the operator does not scale this DisaggDeployment."""
        state = self.states.get(key)
        if state is None:
            return None
        return scaler_memory.encode(scaler_memory.Memory(state, self.evaluated_at.get(key, 0.0)))

    async def step(
        self,
        key: Key,
        spec: DisaggDeploymentSpec,
        plan: DeploymentPlan,
        live: dict[ChildKey, dict[str, Any]],
        pods: list[dict[str, Any]],
        stamp: str,
        hold_down: str | None = None,
    ) -> ScaleReport:
        """`hold_down`: why scale-downs wait this time (a P/D rollout in progress), or None."""
        report = ScaleReport()
        external = external_pools(spec)
        if not scaled_pools(spec):
            self.forget(key)
            if external:
                report.condition = ConditionUpdate(
                    "ScalingActive",
                    "True",
                    "ExternalController",
                    f"an external autoscaler (HPA/KEDA) owns the replicas of: {', '.join(external)}",
                )
            return report
        refusal = self._refused_source(spec)
        if refusal is not None:
            report.condition = ConditionUpdate("ScalingActive", "False", "MetricsSourceNotAllowed", refusal)
            return report
        now = self.wall_clock()
        if now < self.next_due.get(key, 0.0):
            return report  # not due: the status keeps the last decision
        config = self._config(key, spec)
        self.next_due[key] = now + config.interval_s
        observation = await self._observe(key, spec, config, pods, now)
        decision = decide(config, observation, self.states.get(key), now)
        self.states[key] = decision.state
        self.evaluated_at[key] = now
        report.condition = ConditionUpdate(
            "ScalingActive", decision.condition.status, decision.condition.reason, decision.condition.message
        )
        await self._actuate(key, plan, live, decision, stamp, report, hold_down)
        return report

    def _refused_source(self, spec: DisaggDeploymentSpec) -> str | None:
        """Why the spec's metrics source may not be used (a Prometheus the install does not allow), if it may not."""
        prometheus = spec.scaling.metrics.prometheus
        if spec.scaling.metrics.source != "prometheus" or prometheus is None:
            return None
        if prometheus_allowed(prometheus.url, self.allowed_prometheus):
            return None
        return not_allowed_message(prometheus.url, self.allowed_prometheus)

    async def _observe(
        self, key: Key, spec: DisaggDeploymentSpec, config: PolicyConfig, pods: list[dict[str, Any]], now: float
    ) -> Observation:
        source: ObservationSource = self.direct
        window = config.interval_s
        metrics_spec = spec.scaling.metrics
        if metrics_spec.source == "prometheus" and metrics_spec.prometheus is not None:
            url = metrics_spec.prometheus.url
            source = self.prometheus.setdefault(url, PrometheusSource(url))
            window = float(parse_duration(metrics_spec.prometheus.window))
        return await source.observe(*key, pods, now, window)

    async def _actuate(
        self,
        key: Key,
        plan: DeploymentPlan,
        live: dict[ChildKey, dict[str, Any]],
        decision: Decision,
        stamp: str,
        report: ScaleReport,
        hold_down: str | None = None,
    ) -> None:
        namespace, name = key
        workloads = {workload.role: workload for workload in plan.workloads}
        for pool in POOLS:
            pool_decision = decision.pool(pool)
            if pool_decision is None:
                continue
            metrics.SCALING_DESIRED.labels(namespace, name, pool).set(pool_decision.replicas)
            workload = workloads[pool]
            child = live.get((workload.kind, workload.name))
            if child is None:
                continue  # created by the next pass; the decision is made again then
            current = int((child.get("spec") or {}).get("replicas", 1))
            if pool_decision.replicas == current:
                continue
            if hold_down is not None and pool_decision.replicas < current and report.condition is not None:
                # Removing pods mid-rollout could take an old revision's last engine of one role and leave its
                # engines of the other role serving nothing; the scale-down is decided again once it is over.
                report.condition = ConditionUpdate(
                    report.condition.type,
                    report.condition.status,
                    report.condition.reason,
                    f"{report.condition.message}; {pool} {current} -> {pool_decision.replicas} waits: {hold_down}",
                )
                continue
            applied = await self.kube.apply(replicas_patch(child, pool_decision.replicas), manager=REPLICAS_MANAGER)
            live[(workload.kind, workload.name)] = applied
            direction = "up" if pool_decision.replicas > current else "down"
            metrics.SCALING_DECISIONS.labels(pool, direction).inc()
            message = f"{pool} {current} -> {pool_decision.replicas}: {pool_decision.reason}"
            report.last_scale[pool] = (stamp, pool_decision.reason)
            report.notices.append(Notice("Normal", "ScaledUp" if direction == "up" else "ScaledDown", message))
