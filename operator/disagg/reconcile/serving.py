"""The serving check's shell: probe the frontend, admit engines, remediate, report. Runs inside the reconcile pass.

Like the scaler (D23) it runs in the pass, so status has one writer; a round runs only when it is due (every
`spec.serving.check.interval`, 2 s after a round with a failed pair, or at once when an engine comes up that has
not been probed). Between rounds the Serving condition keeps its last value. Everything it decides comes from the
pure `disagg.health` functions; this module calls the frontend, patches pod conditions, deletes pods and records
what it did.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from disagg.health.admission import decide_admissions, revision_counts
from disagg.health.pods import EnginePod, engine_pods, gate_message
from disagg.health.remediation import Memory, Plan, memory_from_status, memory_status, plan_remediation
from disagg.health.rollback import rollback_revision
from disagg.health.sample import choose_pairs
from disagg.health.verdict import CheckState, PairRecord, Verdict, judge, not_checked
from disagg.names import LABEL_ROLE, POOLS, SERVING_GATE, PoolName
from disagg.plan.model import DeploymentPlan
from disagg.plan.serving import ServingPlan

from . import metrics
from .children import ChildKey
from .conditions import ConditionUpdate
from .events import Notice
from .kube import Kube, KubeError
from .prober import ProbeError, Prober
from .workqueue import Key

log = logging.getLogger("disagg.serving")

RECHECK_SECONDS = 2.0
"""A round in which a pair failed is repeated this soon, so a real failure is confirmed within seconds."""
MAX_STATUS_PAIRS = 10


@dataclass
class ServingReport:
    """What this pass's serving step found, for status and events."""

    mode: str = "Off"
    condition: ConditionUpdate | None = None
    """The new Serving condition, or None to keep the previous one (no round was due)."""
    status: dict[str, Any] | None = None
    """status.serving, or None to keep the previous one."""
    serving_engines: dict[str, int] | None = None
    rollout: dict[str, Any] | None = None
    degraded: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) that make the DisaggDeployment Degraded (drained pairs, a stuck P/D rollout)."""
    notices: list[Notice] = field(default_factory=list)
    due_in: float | None = None
    """Seconds until the next round; the reconciler re-queues the key then."""


REPLACEMENTS = "replacements"
"""The key of `status.serving` holding the replacement cooldown's inputs (health/remediation.py `memory_status`)."""


@dataclass
class _Memory:
    state: CheckState = field(default_factory=CheckState)
    remediation: Memory = field(default_factory=Memory)
    next_due: float = 0.0
    probed: set[tuple[str, int]] = field(default_factory=set)
    """Engine incarnations (pod name, restarts) that some round has probed."""
    frontend_turn: int = 0
    frontends: tuple[str, ...] = ()
    """The ready frontend pods of the last round: a change makes a round due at once."""
    endpoint_failures: int = 0
    endpoint_since: str | None = None
    last: ServingReport | None = None
    held: str = ""
    rollout_target: str = ""
    rollout_started: float | None = None
    rollout_started_text: str | None = None


def desired_replicas(plan: DeploymentPlan, live: dict[ChildKey, dict[str, Any]]) -> dict[PoolName, int]:
    """Each pool's replica count as its workload asks now (the spec's, or the autoscaler's)."""
    out: dict[PoolName, int] = {}
    for workload in plan.workloads:
        if workload.role in POOLS:
            obj = live.get((workload.kind, workload.name))
            replicas = (obj or {}).get("spec", {}).get("replicas", workload.replicas)
            out[workload.role] = int(replicas)
    return out


def target_revision(plan: DeploymentPlan) -> str:
    """The pairing revision the spec asks for: plan/pairing.py's, the one every engine pod carries (D142)."""
    return plan.pairing.revision


class ServingChecker:
    def __init__(self, kube: Kube, prober: Prober, wall_clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.prober = prober
        self.wall_clock = wall_clock
        self.memory: dict[Key, _Memory] = {}

    async def close(self) -> None:
        await self.prober.close()

    def restore(self, key: Key, recorded: Any) -> None:
        """Take the replacement cooldown a previous leader (or this process before a restart) wrote to
        `status.serving.replacements`, unless this process already remembers the DisaggDeployment."""
        if key in self.memory or not isinstance(recorded, dict):
            return
        self.memory[key] = _Memory(remediation=memory_from_status(recorded.get(REPLACEMENTS)))

    def forget(self, key: Key) -> None:
        self.memory.pop(key, None)
        for gauge, labels in [(metrics.SERVING, ())] + [
            (metrics.SERVING_PAIRS, (state,)) for state in ("passing", "failing", "drained")
        ]:
            with contextlib.suppress(KeyError):
                gauge.remove(*key, *labels)

    async def step(
        self,
        key: Key,
        plan: DeploymentPlan,
        live: dict[ChildKey, dict[str, Any]],
        pods: list[dict[str, Any]],
        stamp: str,
        held: str | None = None,
    ) -> ServingReport:
        """`held`: the revision a rollback holds the pools at (instead of the spec's), or None."""
        serving = plan.serving
        memory = self.memory.setdefault(key, _Memory())
        now = self.wall_clock()
        if serving.mode == "Off":
            self.memory.pop(key, None)
            report = ServingReport(
                mode="Off",
                condition=ConditionUpdate(
                    "Serving",
                    "Unknown",
                    "CheckDisabled",
                    "the serving check is off (spec.serving.check.mode, or the operator's --serving-check default "
                    "where the spec leaves it unset), so Ready means only that the pods are ready",
                ),
                status={"mode": "Off", "method": serving.method},
            )
            metrics.SERVING.labels(*key).set(-1)
            return report
        engines = engine_pods(pods)
        notices: list[Notice] = []
        if serving.gated:
            notices += await self._revoke_restarted(key[0], engines)
        desired = desired_replicas(plan, live)
        target = target_revision(plan) if held is None else held
        unprobed = [e for e in engines if (e.candidate or e.routable) and (e.name, e.restarts) not in memory.probed]
        frontends = tuple(self._frontends(serving, pods))
        changed = frontends != memory.frontends
        memory.frontends = frontends
        if now < memory.next_due and not unprobed and not changed and memory.last is not None:
            report = replace(memory.last, notices=notices, due_in=max(memory.next_due - now, 0.1))
            report.rollout, stuck = self._rollout(memory, engines, target, serving, now, stamp, held)
            report.degraded = [d for d in report.degraded if d[0] not in ("RolloutStuck", "RolledBack")] + stuck
            return report

        started = time.monotonic()
        if serving.method == "pairs":
            verdict, outcomes_probed = await self._pairs_round(key, serving, memory, engines, pods, stamp)
        else:
            verdict, outcomes_probed = await self._endpoint_round(serving, memory, pods, stamp)
        metrics.SERVING_CHECK_DURATION.labels(serving.method).observe(time.monotonic() - started)
        memory.probed |= outcomes_probed
        memory.probed = {p for p in memory.probed if any(e.name == p[0] and e.restarts == p[1] for e in engines)}

        report = ServingReport(mode=serving.mode, notices=notices)
        report.condition = ConditionUpdate("Serving", verdict.status, verdict.reason, verdict.message[:2000])
        report.status = self._status(serving, verdict, memory, stamp)
        if serving.method == "pairs" and verdict.reason not in ("CheckFailed", "NoFrontend"):
            report.serving_engines = dict(verdict.serving_engines)
            plan_ = plan_remediation(
                serving.action, verdict, memory.state, engines, memory.remediation, now, serving.cooldown, desired
            )
            await self._remediate(key, serving, plan_, memory, pods, stamp, report)
            if (replacements := memory_status(memory.remediation)) is not None and report.status is not None:
                report.status[REPLACEMENTS] = replacements
            if serving.gated:
                report.notices += await self._admit(key[0], engines, verdict, desired, target)
        if verdict.drained:
            report.degraded.append(
                (
                    "PairsDrained",
                    f"{verdict.drained} failing pairs are drained (fewer pairs serve): "
                    + "; ".join(f"{f.pair.label}: {f.record.error}" for f in verdict.failing if f.record.drained)[
                        :1500
                    ],
                )
            )
        report.rollout, stuck = self._rollout(memory, engines, target, serving, now, stamp, held)
        report.degraded += stuck
        self._export(key, serving, verdict)
        due = RECHECK_SECONDS if verdict.suspect or verdict.suspect_candidates else serving.interval
        memory.next_due = self.wall_clock() + due
        report.due_in = due
        memory.last = replace(report, notices=[])
        return report

    # -- rounds ------------------------------------------------------------------------------------------------

    def _frontends(self, serving: ServingPlan, pods: list[dict[str, Any]]) -> list[str]:
        """Pod IPs to check through. The operator's frontend is asked as soon as it runs: it is Ready only with a
        routable pair, and engines become routable only once a probe through it admitted them. Other endpoints
        (vllm-router, decode) must be Ready, as the Service would require. Ready pods first."""
        found: list[tuple[bool, str, str]] = []
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(LABEL_ROLE) != serving.role or any(labels.get(k) != v for k, v in serving.selector.items()):
                continue
            status = pod.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            running = status.get("phase") == "Running" and bool(status.get("podIP"))
            if pod["metadata"].get("deletionTimestamp") or not running or (serving.method != "pairs" and not ready):
                continue
            found.append((not ready, pod["metadata"]["name"], str(status["podIP"])))
        return [ip for _, _, ip in sorted(found)]

    async def _pairs_round(
        self,
        key: Key,
        serving: ServingPlan,
        memory: _Memory,
        engines: list[EnginePod],
        pods: list[dict[str, Any]],
        stamp: str,
    ) -> tuple[Verdict, set[tuple[str, int]]]:
        frontends = self._frontends(serving, pods)
        if not frontends:
            return not_checked("False", "NoFrontend", "no frontend pod is running, so nothing can be served"), set()
        host = frontends[memory.frontend_turn % len(frontends)]
        memory.frontend_turn += 1
        try:
            refs = await self.prober.pairs(host, serving.port)
            chosen = choose_pairs(refs, memory.state, engines, serving.max_pairs)
            outcomes = await self.prober.probe(host, serving.port, chosen, serving.deadline)
        except ProbeError as exc:
            metrics.SERVING_CHECKS.labels("pairs", "unknown").inc()
            message = f"the frontend's admin API at {host}:{serving.port} did not answer the check: {exc}"
            return not_checked("Unknown", "CheckFailed", message), set()
        memory.state, verdict = judge(memory.state, outcomes, engines, serving.failure_threshold, stamp)
        result = {"True": "serving", "False": "failing"}.get(verdict.status, "unknown")
        metrics.SERVING_CHECKS.labels("pairs", result).inc()
        by_name = {e.name: e for e in engines}
        probed = {(name, by_name[name].restarts) for o in outcomes for name in (o.prefill, o.decode) if name in by_name}
        return verdict, probed

    async def _endpoint_round(
        self, serving: ServingPlan, memory: _Memory, pods: list[dict[str, Any]], stamp: str
    ) -> tuple[Verdict, set[tuple[str, int]]]:
        frontends = self._frontends(serving, pods)
        what = "router" if serving.role == "router" else "decode engine"
        if not frontends:
            return not_checked("False", "NoFrontend", f"no {what} pod is ready, so nothing can be served"), set()
        host = frontends[memory.frontend_turn % len(frontends)]
        memory.frontend_turn += 1
        outcome = await self.prober.complete(host, serving.port, serving.model, serving.deadline)
        if outcome.ok:
            memory.endpoint_failures, memory.endpoint_since = 0, None
            metrics.SERVING_CHECKS.labels("endpoint", "serving").inc()
            message = (
                f"a completion through the {what} at {host}:{serving.port} answered in {outcome.latency:.2f} s "
                "(endpoint check: which prefill/decode pairs work is only known with the operator's frontend)"
            )
            return Verdict("True", "EndpointServes", message, pairs=1, probed=1, passing=1), set()
        memory.endpoint_failures += 1
        memory.endpoint_since = memory.endpoint_since or stamp
        metrics.SERVING_CHECKS.labels("endpoint", "failing").inc()
        message = f"a completion through the {what} at {host}:{serving.port} failed: {outcome.error}"
        if memory.endpoint_failures < serving.failure_threshold:
            last = memory.last.condition if memory.last else None
            status = last.status if last is not None else "Unknown"
            return Verdict(status, last.reason if last else "NotChecked", message, suspect=1), set()
        return Verdict("False", "EndpointFailing", message), set()

    # -- actions -----------------------------------------------------------------------------------------------

    async def _set_gate(self, namespace: str, pod: EnginePod, status: str, reason: str, message: str) -> bool:
        condition = {"type": SERVING_GATE, "status": status, "reason": reason, "message": message[:1000]}
        try:
            await self.kube.patch_pod_condition(namespace, pod.name, pod.uid, condition)
        except KubeError as exc:
            if exc.status in (404, 409, 422):
                return False  # gone or replaced since we listed it; the next pass sees the new pod
            raise
        return True

    async def _revoke_restarted(self, namespace: str, engines: list[EnginePod]) -> list[Notice]:
        """A container restarted: its old admission does not cover the new incarnation (peers may hold state about
        the previous one), so the pod is made unready until its pairs pass again."""
        notices = []
        for pod in engines:
            if pod.gated and pod.gate_status == "True" and not pod.admitted:
                message = gate_message(pod.restarts, "restarted; ready again once its pairs pass")
                if await self._set_gate(namespace, pod, "False", "Restarted", message):
                    metrics.ADMISSIONS.labels("revoked").inc()
                    notices.append(
                        Notice(
                            "Warning",
                            "EngineRestarted",
                            f"{pod.role} pod {pod.name} restarted (restarts={pod.restarts}): not ready until a pair "
                            "through it passes the serving check",
                        )
                    )
        return notices

    async def _admit(
        self,
        namespace: str,
        engines: list[EnginePod],
        verdict: Verdict,
        desired: dict[PoolName, int],
        target: str,
    ) -> list[Notice]:
        if not any(e.candidate for e in engines):
            return []
        decision = decide_admissions(engines, verdict.passing_candidates, desired, target)
        by_name = {e.name: e for e in engines}
        admitted = []
        for name in decision.admit:
            pod = by_name[name]
            partners = ", ".join(sorted(verdict.candidate_partners.get(name, frozenset()))[:3])
            message = gate_message(pod.restarts, f"a pair through it served (with {partners})")
            if await self._set_gate(namespace, pod, "True", "PairsServe", message):
                admitted.append(pod)
                metrics.ADMISSIONS.labels("admitted").inc()
        if not admitted:
            return []
        names = ", ".join(f"{p.role} {p.name}" + (f" (revision {p.revision})" if p.revision else "") for p in admitted)
        return [Notice("Normal", "EnginesAdmitted", f"ready after their pairs served: {names}")]

    async def _remediate(
        self,
        key: Key,
        serving: ServingPlan,
        plan: Plan,
        memory: _Memory,
        pods: list[dict[str, Any]],
        stamp: str,
        report: ServingReport,
    ) -> None:
        namespace = key[0]
        memory.remediation = plan.memory
        if plan.state is not None:
            memory.state = plan.state
        if plan.replace is not None:
            victim = plan.replace
            try:
                await self.kube.delete("Pod", namespace, victim.name, victim.uid)
            except KubeError as exc:
                report.notices.append(Notice("Warning", "RemediationFailed", f"deleting pod {victim.name}: {exc}"))
            else:
                metrics.REMEDIATIONS.labels("recreated").inc()
                report.notices.append(
                    Notice("Warning", "RecreatedEngine", f"deleted pod {victim.name}: {plan.replace_reason}")
                )
                self._record(report, stamp, "RecreatedEngine", victim.name, plan.replace_reason)
        frontends = self._frontends(serving, pods)
        if plan.drain or plan.undrain:
            # Telling the frontend what to skip is a write too: a replica that lost the lease must not (D143).
            self.kube.check_may_write("draining pairs at the frontend")
        if plan.drain:
            reason = "failing the serving check"
            for host in frontends:
                for pair in plan.drain:
                    try:
                        await self.prober.drain(
                            host, serving.port, pair.prefill, pair.decode, serving.drain_for, reason
                        )
                    except ProbeError as exc:
                        log.warning("draining %s at %s: %s", pair.label, host, exc)
            metrics.REMEDIATIONS.labels("drained").inc(len(plan.drain))
            labels = ", ".join(p.label for p in plan.drain[:10])
            errors = "; ".join(f"{p.label}: {memory.state.pairs.get(p, PairRecord()).error}" for p in plan.drain[:3])
            report.notices.append(
                Notice("Warning", "DrainedPairs", f"the frontend no longer chooses {labels}: {errors}")
            )
            self._record(report, stamp, "DrainedPairs", labels, errors)
        if plan.undrain:
            for host in frontends:
                for pair in plan.undrain:
                    try:
                        await self.prober.undrain(host, serving.port, pair.prefill, pair.decode)
                    except ProbeError as exc:
                        log.warning("undraining %s at %s: %s", pair.label, host, exc)
            metrics.REMEDIATIONS.labels("undrained").inc(len(plan.undrain))
            labels = ", ".join(p.label for p in plan.undrain[:10])
            report.notices.append(Notice("Normal", "UndrainedPairs", f"serving again, back in rotation: {labels}"))
        held = "; ".join(plan.held)
        if held and held != memory.held:
            metrics.REMEDIATIONS.labels("held").inc()
            report.notices.append(Notice("Warning", "RemediationHeld", held[:1024]))
            self._record(report, stamp, "Held", "", held)
        memory.held = held

    def _record(self, report: ServingReport, stamp: str, action: str, target: str, reason: str) -> None:
        if report.status is not None:
            report.status["lastRemediation"] = {
                "time": stamp,
                "action": action,
                "target": target[:500],
                "reason": reason[:1000],
            }

    # -- reporting ---------------------------------------------------------------------------------------------

    def _status(self, serving: ServingPlan, verdict: Verdict, memory: _Memory, stamp: str) -> dict[str, Any]:
        status: dict[str, Any] = {
            "mode": serving.mode,
            "method": serving.method,
            "lastCheckTime": stamp,
            "pairs": verdict.pairs,
            "probed": verdict.probed,
            "passing": verdict.passing,
            "failing": len(verdict.failing),
            "drained": verdict.drained,
        }
        if verdict.slowest is not None:
            status["slowestSeconds"] = round(verdict.slowest, 3)
        failing = [
            {
                "prefill": f.pair.prefill,
                "decode": f.pair.decode,
                "revision": f.revision,
                "error": f.record.error,
                "drained": f.record.drained,
                **({"since": f.record.since} if f.record.since else {}),  # the CRD's fields are not nullable
            }
            for f in verdict.failing[:MAX_STATUS_PAIRS]
        ]
        if failing:
            status["failingPairs"] = failing
        previous = memory.last.status if memory.last and memory.last.status else {}
        if previous.get("lastRemediation"):
            status["lastRemediation"] = previous["lastRemediation"]
        return status

    def _rollout(
        self,
        memory: _Memory,
        engines: list[EnginePod],
        target: str,
        serving: ServingPlan,
        now: float,
        stamp: str,
        held: str | None,
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        rows = revision_counts(engines)
        others = [revision for revision, row in rows if revision != target and any(row.values())]
        target_row = next((row for revision, row in rows if revision == target), {})
        if memory.rollout_target != target:
            memory.rollout_target, memory.rollout_started, memory.rollout_started_text = target, None, None
        if others:
            if memory.rollout_started is None:
                memory.rollout_started, memory.rollout_started_text = now, stamp
            state = "RollingOut"
        else:
            memory.rollout_started, memory.rollout_started_text = None, None
            state = "Complete"
        waiting = ""
        if others:
            waiting = (
                f"revision {target or '(none)'}: {target_row.get('prefill', 0)} prefill and "
                f"{target_row.get('decode', 0)} decode ready, {target_row.get('waiting_prefill', 0)} and "
                f"{target_row.get('waiting_decode', 0)} up and being probed; older revisions "
                f"{', '.join(others)} serve meanwhile"
            )
        stuck: list[tuple[str, str]] = []
        rollback_to = None
        if held is not None:
            state = "RolledBack"
            stuck.append(
                (
                    "RolledBack",
                    f"the rollout of the spec's pairing revision was stuck and is rolled back to revision {held} "
                    "(spec.serving.rollout.onStuck: Rollback); the pools run the previous pod templates until the "
                    "spec changes",
                )
            )
        elif (
            state == "RollingOut"
            and memory.rollout_started is not None
            and now - memory.rollout_started > serving.progress_deadline
        ):
            state = "Stuck"
            stuck.append(
                (
                    "RolloutStuck",
                    f"the rollout to pairing revision {target} has not completed in "
                    f"{serving.progress_deadline:.0f} s ({waiting})",
                )
            )
            if serving.on_stuck == "Rollback":
                rollback_to = rollback_revision(engines, target)
        status: dict[str, Any] = {
            "revision": target,
            "state": state,
            "revisions": [
                {
                    "revision": revision,
                    "prefill": row["prefill"],
                    "decode": row["decode"],
                    "waitingPrefill": row["waiting_prefill"],
                    "waitingDecode": row["waiting_decode"],
                }
                for revision, row in rows
            ],
        }
        if memory.rollout_started_text:
            status["startedTime"] = memory.rollout_started_text
        if waiting:
            status["waitingFor"] = waiting
        if rollback_to is not None:
            status["rollbackTo"] = rollback_to
        return status, stuck

    def _export(self, key: Key, serving: ServingPlan, verdict: Verdict) -> None:
        metrics.SERVING.labels(*key).set({"True": 1, "False": 0}.get(verdict.status, -1))
        if serving.method == "pairs":
            metrics.SERVING_PAIRS.labels(*key, "passing").set(verdict.passing)
            metrics.SERVING_PAIRS.labels(*key, "failing").set(len(verdict.failing) - verdict.drained)
            metrics.SERVING_PAIRS.labels(*key, "drained").set(verdict.drained)
