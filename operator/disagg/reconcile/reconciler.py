"""One idempotent pass per DisaggDeployment: validate -> render -> apply -> prune -> observe -> status -> events.

Level-triggered: every pass recomputes the full desired state from the spec and the live children, so it is safe
after a restart, a crash mid-pass, a stale event, or any number of repeats.

The pass reads the cluster from the watch cache (the DisaggDeployment, its children, its pods), never by listing
(D121); what it writes goes into the cache at once. It applies only the children that changed since it last
applied them (`applied.py`), and those concurrently in two waves (`names.FIRST_WAVE`, D124). Writes pass the
leader's write gate; a replica that is not (or no longer) the leader gets `NotLeader`, and the pass stops where it
is without reporting anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from disagg.api.defaults import stored_status
from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.validate import ValidationResult
from disagg.health.pods import controller_uid, owned_pods, owned_replica_sets
from disagg.health.rollback import template_of, template_revision
from disagg.names import CHILD_KINDS, DISAGG_DEPLOYMENT, FIRST_WAVE, KINDS, POD, POOLS, REPLICA_SET
from disagg.plan.model import DEFAULT_INSTALLATION, DeploymentPlan, Installation, WorkloadPlan

from . import metrics
from .applied import AppliedMemo, SentKeys, sent_digest
from .autoscale import Autoscaler, ScaleReport, interval_seconds, scaled_pools
from .cache import Cache
from .children import REPLICAS_MANAGER, ChildKey, child_key, select_prunable
from .events import Notice, event_object, notices_for
from .kube import Kube, KubeError, NotLeader
from .ownership import CREATE_ONLY_VERSION, Claim, claim, conflict_message, replicas_action, replicas_patch
from .priority import urgent_requests
from .refusals import Refusals
from .rendered import CoreMemo
from .serving import ServingChecker, ServingReport
from .settled import Settled, SettledMemo, inputs, shapes
from .status import StatusInputs, StatusReport, compute_status, failed_pass_status
from .urgency import awaits_pass
from .workqueue import CHANGE, LANES, Key, WorkQueue

log = logging.getLogger("disagg.reconcile")

TRANSIENT_BEFORE_REPORTING = 3
"""Consecutive passes failing with a retryable error before the error is reported in status."""
REAPPLY_SECONDS = 3600.0
"""Unchanged children are applied again after this long anyway (applied.py)."""
SCALER_STATE = "scalerState"
"""The status key holding the autoscaler's learned state (scaler_memory.py, D126)."""
PHASES = ("Pending", "Progressing", "Ready", "Degraded", "Invalid")
APPLIED_DIGEST = "appliedDigest"
"""The status key holding the digest of what was applied to the children (applied.py, D192)."""


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RetryLater(Exception):
    """The pass hit something worth retrying soon (conflict, throttling, an unreachable API server)."""


class _NamespaceTerminating(Exception):
    """An apply was refused because the namespace is being deleted: the pass ends, nothing to report."""


@dataclass
class PassState:
    """What one pass has learned so far: each step reads it and adds to it."""

    key: Key
    owner: dict[str, Any]
    plan: DeploymentPlan
    live: dict[ChildKey, dict[str, Any]]
    """Our children as listed at the start of the pass, updated with what apply returned and prune removed."""
    desired: set[ChildKey] = field(default_factory=set)
    claims: dict[ChildKey, Claim] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Desired children whose name is taken by an object that is not ours: while there is one, nothing is applied."""
    apply_errors: list[str] = field(default_factory=list)
    missing_apis: list[str] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    scaling: ScaleReport = field(default_factory=ScaleReport)
    serving: ServingReport | None = None
    held: str | None = None
    """The pairing revision a rollback holds the pools at (their previous pod templates), or None."""
    sent: dict[ChildKey, str] = field(default_factory=dict)
    """The core's digests of what applying each rendered child sends (`Core.sent`)."""


def held_revision(previous: dict[str, Any], generation: int | None) -> str | None:
    """A rollback holds while the spec is the one whose rollout was rolled back (onStuck: Rollback)."""
    rollout = previous.get("rollout") or {}
    if generation is not None and rollout.get("rolledBackGeneration") == generation:
        revision = rollout.get("rolledBackTo")
        return str(revision) if revision is not None else None
    return None


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        cache: Cache,
        instance: str = "disagg-operator",
        clock: Callable[[], str] = rfc3339_now,
        autoscaler: Autoscaler | None = None,
        reapply_seconds: float = REAPPLY_SECONDS,
        installation: Installation = DEFAULT_INSTALLATION,
        serving: ServingChecker | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        """`serving`: the serving check (None: no check; the status then says nothing about serving, and the plan
        gates no pod: `installation.serving_check` counts as Off). `installation.serving_check`: the check's mode
        where a spec leaves it unset (`disagg run --serving-check`)."""
        if serving is None:
            installation = replace(installation, serving_check="Off")
        self.kube = kube
        self.refusals = refusals if refusals is not None else Refusals()
        """Kinds RBAC keeps the informers from reading (D151): a pass that would write one does not run."""
        self.cache = cache
        self.installation = installation
        self.autoscaler = autoscaler
        self.serving = serving
        self.instance = instance
        self.clock = clock
        self.queue = WorkQueue(urgent=self._urgent)
        self.known: set[Key] = set()
        self.phases: dict[Key, str] = {}
        self._phase_counts: dict[str, int] = {}
        for phase in PHASES:
            metrics.DEPLOYMENTS_BY_PHASE.labels(phase).set(0)
        self.applied = AppliedMemo(reapply_seconds)
        self.cores = CoreMemo(installation=installation)
        self.settled = SettledMemo()

    def _urgent(self, key: Key) -> bool:
        """The work queue's change lane (D210): a spec no pass has reconciled yet."""
        return awaits_pass(self.cache.get(DISAGG_DEPLOYMENT.name, *key))

    # -- entry points used by the kopf handlers -----------------------------------------------------------------

    def request(self, key: Key) -> None:
        self.known.add(key)
        self.queue.add(key)
        metrics.QUEUE_DEPTH.set(len(self.queue))

    def forget(self, key: Key) -> None:
        if self.autoscaler is not None:
            self.autoscaler.forget(key)
        if self.serving is not None:
            self.serving.forget(key)
        self.known.discard(key)
        self.queue.forget(key)
        self._set_phase(key, None)
        self.applied.drop(key)
        self.cores.forget(key)
        self.settled.drop(key)

    def stand_down(self) -> None:
        """This replica stopped leading: drop the queue; the keys stay known and are all reconciled on return."""
        self.queue = WorkQueue(self.queue.base_delay, self.queue.max_delay, urgent=self._urgent)

    def forget_writes(self) -> None:
        """Another replica may have led since this one last did: what this one remembers of its writes and the
        scaler's in-process state may be out of date, so the first passes apply everything and the scaler resumes
        from status (D123, D126)."""
        self.applied.clear()
        self.settled.clear()
        if self.autoscaler is not None:
            self.autoscaler.reset()
        if self.serving is not None:
            self.serving.memory.clear()  # failing streaks and drains as this replica last saw them

    def request_all(self) -> None:
        """Every known key, as revisits: a change arriving meanwhile goes ahead of them (D153)."""
        for key in sorted(self.known):
            self.queue.add(key, revisit=True)
        metrics.QUEUE_DEPTH.set(len(self.queue))

    async def prepare(self, pause: float = 1.0) -> None:
        """While this replica stands by (until cancelled): render every known DisaggDeployment it has not rendered
        for its current spec, one at a time, so that after a takeover the first passes do not wait for rendering
        (D193). The standby's watch cache already holds everything a pass reads; this adds what it computes."""
        seen: dict[Key, int | None] = {}
        while True:
            current: dict[Key, int | None] = {}
            for key in sorted(self.known):
                # By shape, not version (D249): the leader's status writes change every version, not what renders.
                shape = self.cache.shape(DISAGG_DEPLOYMENT.name, *key)
                current[key] = shape
                if shape is None or seen.get(key) == shape:
                    continue
                owner = self.cache.get(DISAGG_DEPLOYMENT.name, *key)
                if owner is not None and not owner["metadata"].get("deletionTimestamp"):
                    self.cores.get(owner)  # a memo: renders only when the spec is new to it
                await asyncio.sleep(0)  # the informers and kopf's watch keep the loop
            seen = current
            await asyncio.sleep(pause)

    async def run(self, workers: int, resync_seconds: float, stop: asyncio.Event) -> None:
        self.queue.restamp()
        tasks = [asyncio.create_task(self._worker(stop), name=f"reconcile-{i}") for i in range(workers)]
        tasks.append(asyncio.create_task(self._resync(resync_seconds, stop), name="resync"))
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _resync(self, interval: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(interval)
            for key in sorted(self.known):
                self.queue.add(key, revisit=True)

    async def _worker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            taken = await self.queue.take()
            key = taken.key
            metrics.QUEUE_DEPTH.set(len(self.queue))
            metrics.QUEUE_WAIT.labels(LANES[taken.lane]).observe(taken.waited)
            try:
                with urgent_requests(taken.lane == CHANGE):
                    await self.process(key)
            finally:
                self.queue.done(key)

    async def process(self, key: Key) -> float | None:
        """One pass of the key and its bookkeeping: a pass that succeeds resets the key's backoff; one that fails, or
        ends with an error the status reports ("retry"), counts a failure and schedules the key again after the
        backoff, which keeps growing for as long as the failure lasts. Returns the retry delay, if one was set."""
        started = time.monotonic()
        result, delay = "ok", None
        try:
            outcome = await self.reconcile(key)
            if outcome == "retry":
                result = "degraded"
                delay = self.queue.retry(key)
            else:
                result = "unchanged" if outcome == "unchanged" else "ok"
                self.queue.succeeded(key)
        except NotLeader as exc:
            result = "not_leader"  # the new leader reconciles it; nothing of this pass is reported
            log.info("pass of %s/%s stopped: %s", *key, exc)
        except RetryLater as exc:
            result = "retry"
            delay = self.queue.retry(key)
            metrics.RECONCILE_ERRORS.labels("transient").inc()
            log.warning("reconcile of %s/%s will be retried in %.0fs: %s", *key, delay, exc)
            if self.queue.failures(key) > TRANSIENT_BEFORE_REPORTING:
                await self._report_failure(
                    key, f"the last {self.queue.failures(key)} passes failed before finishing ({exc}); retrying"
                )
        except Exception as exc:  # a bug must not stop the operator or the other DisaggDeployments
            result = "error"
            delay = self.queue.retry(key)
            metrics.RECONCILE_ERRORS.labels("unexpected").inc()
            log.exception("reconcile of %s/%s failed unexpectedly; retrying in %.0fs", *key, delay)
            await self._report_failure(
                key,
                f"the operator failed reconciling this DisaggDeployment ({type(exc).__name__}: {exc}) and retries "
                "with backoff; this is a bug in disagg-operator: please report it with the operator's log",
            )
        finally:
            metrics.RECONCILE_DURATION.labels(result).observe(time.monotonic() - started)
        return delay

    async def _report_failure(self, key: Key, message: str) -> None:
        """Best effort: put a failing pass in status, so the retries are never silent. When even that fails (the
        API server is unreachable, the status may not be written), the log and the error metric still say it."""
        try:
            owner = self.cache.get(DISAGG_DEPLOYMENT.name, *key)
            if owner is None or owner["metadata"].get("deletionTimestamp"):
                return
            previous = owner.get("status") or {}
            report = failed_pass_status(previous, previous.get("observedGeneration"), self.clock(), message)
            await self._publish(owner, report, [])
        except Exception as exc:
            log.warning("could not report the failure of %s/%s in status: %s", *key, exc)

    async def _report_refused(self, owner: dict[str, Any], message: str) -> None:
        """Degraded (AccessDenied) and a Warning event when that is new; nothing is applied or pruned."""
        metrics.RECONCILE_ERRORS.labels("access_denied").inc()
        previous = owner.get("status") or {}
        report = failed_pass_status(
            previous, previous.get("observedGeneration"), self.clock(), message, reason="AccessDenied"
        )
        notices = []
        before = _degraded(owner)
        if before is not None and before.get("reason") != "AccessDenied":
            # Degraded already, for another reason: no transition will name this, so it gets an event of its own.
            notices.append(Notice("Warning", "AccessDenied", message))
        await self._publish(owner, report, notices)

    # -- the pass itself: read, validate, plan, then apply -> prune -> observe -> status -> events -------------------

    async def reconcile(self, key: Key) -> str:
        """Returns "ok", "unchanged" (the last successful pass started from exactly what this one would read, so it
        was not run, D190), "invalid", "gone", "refused" (RBAC hides a kind it needs; the informer requests every
        DisaggDeployment again once it may read it), or "retry" (a permanent-looking failure to revisit with
        backoff)."""
        namespace, name = key
        current = inputs(self.cache, key, self.refusals.version)
        due = self.applied.due(key)  # a re-apply is due: the full pass
        last = None if due else self.settled.last(key)
        if last is not None and last.inputs == current and not last.timed:
            return "unchanged"
        shaped = shapes(self.cache, key, self.refusals.version)
        self.settled.drop(key)
        owner = self.cache.get(DISAGG_DEPLOYMENT.name, namespace, name)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            self.forget(key)  # owner references let the garbage collector remove the children
            return "gone"
        generation = owner["metadata"].get("generation")
        previous = owner.get("status") or {}
        core = self.cores.get(owner)
        if isinstance(core, ValidationResult):
            metrics.RECONCILE_ERRORS.labels("invalid_spec").inc()
            status_inputs = StatusInputs(generation, previous, self.clock(), problems=core.problems)
            await self._publish(owner, compute_status(status_inputs), [])
            self.settled.record(key, Settled(current, timed=False))
            return "invalid"

        state = PassState(key, owner, core.plan, live=self._children(namespace, name), sent=core.sent)
        state.held = held_revision(previous, generation) if core.plan.serving.gated else None
        # The claim, apply and prune steps read no status but the hold's revision (settled.py, D249): started from
        # the shapes the last successful pass started from, they would write nothing again.
        repeat = last is not None and last.shapes == shaped and last.held == state.held
        if not repeat:
            desired = core.desired()
            refused = self.refusals.blocking([obj["kind"] for obj in desired], namespace)
            if refused:
                await self._report_refused(owner, "; ".join(refusal.explain() for refusal in refused))
                return "refused"
            if await self._claim(state, desired):
                if state.held is not None:
                    await self._hold_templates(state, desired, state.held)
                if not await self._apply(state, desired):
                    return "gone"  # the namespace and everything in it is going away
                if not state.conflicts:
                    await self._prune(state)
        else:
            metrics.PASSES_APPLY_SKIPPED.inc()
        await self._observe(state, core.spec)
        await self._publish(owner, compute_status(self._status_inputs(state)), state.notices, state)
        if state.apply_errors or state.missing_apis or state.conflicts:
            return "retry"
        timed = self._timed(core.spec, core.plan)
        self.settled.record(key, Settled(current, timed=timed, shapes=shaped, held=state.held))
        return "ok"

    def _timed(self, spec: DisaggDeploymentSpec, plan: DeploymentPlan) -> bool:
        """Whether a pass has steps that read the clock: the scaler's evaluations, the serving check's rounds."""
        scaling = self.autoscaler is not None and bool(scaled_pools(spec))
        return scaling or (self.serving is not None and plan.serving.mode != "Off")

    async def _claim(self, state: PassState, desired: list[dict[str, Any]]) -> bool:
        """Decide for every desired child whether it is ours to write (D70). A child the cache holds as ours is
        judged on the cached copy. Any other is read first (the watches see only labelled objects, so a foreign one
        at that name is not in the cache), concurrently, except in the first wave: those are created only if
        nothing is at their name, and read only when something is (`_apply`, D191). False, with the conflicts
        recorded, when any name read is taken by an object that is not ours."""
        namespace = state.key[0]
        unread = [obj for obj in desired if child_key(obj) not in state.live and obj["kind"] not in FIRST_WAVE]
        reads = await asyncio.gather(
            *(self.kube.get(obj["kind"], namespace, obj["metadata"]["name"]) for obj in unread), return_exceptions=True
        )
        read = dict(zip((child_key(obj) for obj in unread), reads, strict=True))
        for obj in desired:
            key_of = child_key(obj)
            if key_of in read:
                self._judge(state, obj, read[key_of])
            elif key_of in state.live:
                self._judge(state, obj, state.live[key_of])
            else:
                state.claims[key_of] = Claim("absent")
        self._note_conflicts(state)
        return not state.conflicts

    def _judge(
        self, state: PassState, obj: dict[str, Any], live: dict[str, Any] | BaseException | None
    ) -> Claim | None:
        """Claim one desired child from what is at its name (None: nothing; an exception: the read failed), and
        record a conflict or an unreadable object. None when the API is not served (the apply reports that)."""
        key_of = child_key(obj)
        if isinstance(live, KubeError):
            if live.api_missing:
                return None
            what = f"reading {obj['kind']}/{obj['metadata']['name']}: {live}"
            if live.transient:
                raise RetryLater(what) from live
            # Permanent (403, 422): whose object it is stays unknown, so it is not written; status says why.
            state.apply_errors.append(what)
            decision = Claim("unknown")
        elif isinstance(live, BaseException):
            raise live
        else:
            decision = claim(live, state.owner["metadata"]["uid"], state.key[1])
            if decision.action == "conflict":
                state.conflicts.append(conflict_message(obj["kind"], obj["metadata"]["name"], decision.holder))
        state.claims[key_of] = decision
        return decision

    def _note_conflicts(self, state: PassState) -> None:
        previous = _degraded_message(state.owner)
        if previous:  # Degraded already: no transition event will name a new conflict, so it gets an event of its own
            noticed = {notice.message for notice in state.notices if notice.reason == "NameConflict"}
            new = [text for text in state.conflicts if text not in previous and text not in noticed]
            state.notices += [Notice("Warning", "NameConflict", text) for text in new]

    async def _hold_templates(self, state: PassState, desired: list[dict[str, Any]], revision: str) -> None:
        """Keep the pool Deployments on the pod template of `revision` (from their ReplicaSets) instead of the
        spec's: a rolled back rollout stays rolled back until the spec changes."""
        pools: dict[ChildKey, WorkloadPlan] = {
            (w.kind, w.name): w for w in state.plan.workloads if w.role in POOLS and w.kind == "Deployment"
        }
        for obj in desired:
            workload = pools.get(child_key(obj))
            if workload is None:
                continue
            live_template = (state.live.get(child_key(obj)) or {}).get("spec", {}).get("template") or {}
            template: dict[str, Any] | None = live_template if template_revision(live_template) == revision else None
            if template is None:
                replica_sets = self.cache.owned(REPLICA_SET.name, *state.key)
                live_uid = (state.live.get(child_key(obj)) or {}).get("metadata", {}).get("uid", "")
                template = template_of(owned_replica_sets(replica_sets, live_uid), revision)
            if template is None:
                state.apply_errors.append(
                    f"rolling back {workload.name}: no ReplicaSet runs pairing revision {revision} any more"
                )
                continue
            obj["spec"]["template"] = template

    async def _apply(self, state: PassState, desired: list[dict[str, Any]]) -> bool:
        """Server-side apply every desired object that is ours to write and changed: the first wave, then the rest,
        each wave's objects concurrently. A first-wave name found taken by an object the cache did not show (its
        create-only apply answered 409, D191) is read and claimed then: ours, it is applied in the same pass; not
        ours, it is a conflict and the later waves are not applied. False when the namespace is being deleted."""
        state.desired = {child_key(obj) for obj in desired}
        owned_elsewhere: set[ChildKey] = {(w.kind, w.name) for w in state.plan.workloads if w.replicas_owned_elsewhere}
        waves = [
            [obj for obj in desired if obj["kind"] in FIRST_WAVE],
            [obj for obj in desired if obj["kind"] not in FIRST_WAVE],
        ]
        created: list[str] = []
        self._restore_applied(state, desired, owned_elsewhere)
        try:
            for wave in waves:
                todo = self._changed(state, wave, owned_elsewhere)
                taken = await self._send(state, todo, owned_elsewhere, created)
                if taken:
                    again = await self._claim_taken(state, taken)
                    self._note_conflicts(state)
                    await self._send(state, again, owned_elsewhere, created)
                if state.conflicts:
                    break
        except _NamespaceTerminating:
            return False
        if created:
            state.notices.append(Notice("Normal", "Created", f"created {', '.join(created)}"))
        return True

    def _changed(
        self, state: PassState, wave: list[dict[str, Any]], owned_elsewhere: set[ChildKey]
    ) -> list[tuple[dict[str, Any], str]]:
        """The objects of a wave to send, with the digest of what is sent (the applied memo's key), and their
        preconditions set: the live uid for an update, the impossible version for a creation nobody read."""
        todo = []
        for obj in wave:
            key_of = child_key(obj)
            decision = state.claims.get(key_of)
            if decision is not None and decision.action == "unknown":
                continue  # reported by the claim step
            sent = self._sent(state, obj, key_of in owned_elsewhere)
            if self.applied.unchanged(state.key, obj["kind"], obj["metadata"]["name"], sent, state.live.get(key_of)):
                metrics.APPLIES_SKIPPED.labels(obj["kind"]).inc()
                continue
            if decision is not None and decision.uid is not None:
                obj["metadata"]["uid"] = decision.uid  # a precondition: never write a same-named replacement
            elif decision is not None and decision.action == "absent":
                obj["metadata"]["resourceVersion"] = CREATE_ONLY_VERSION  # never write over what is there
            todo.append((obj, sent))
        return todo

    def _sent(self, state: PassState, obj: dict[str, Any], elsewhere: bool) -> str:
        """What applying `obj` sends, as the applied memo's key: the core's, computed once per spec, unless the
        pass changed the object (a rollback's templates) or an autoscaler holds its replicas."""
        key_of = child_key(obj)
        if not elsewhere and state.held is None and key_of in state.sent:
            return state.sent[key_of]
        return sent_digest(obj, elsewhere, state.live.get(key_of))

    def _restore_applied(self, state: PassState, desired: list[dict[str, Any]], owned_elsewhere: set[ChildKey]) -> None:
        """Without a memory of its own for this DisaggDeployment (after a takeover or a restart), take the one the
        status carries if the children prove it (D192): the first pass then applies only what changed."""
        fingerprint = (state.owner.get("status") or {}).get(APPLIED_DIGEST)
        if not isinstance(fingerprint, str) or self.applied.knows(state.key):
            return
        children = []
        for obj in desired:
            key_of = child_key(obj)
            live = state.live.get(key_of)
            decision = state.claims.get(key_of)
            if live is None or decision is None or decision.action != "update":
                return  # a child to create (or not ours to write): not as the status says
            sent = self._sent(state, obj, key_of in owned_elsewhere)
            children.append((key_of[0], key_of[1], sent, live, SentKeys.of(obj)))
        if self.applied.restore(state.key, fingerprint, children):
            metrics.APPLIED_RESTORED.inc()

    async def _send(
        self,
        state: PassState,
        todo: list[tuple[dict[str, Any], str]],
        owned_elsewhere: set[ChildKey],
        created: list[str],
    ) -> list[tuple[dict[str, Any], str]]:
        """Apply `todo` concurrently and sort out each answer (D21). Returns the create-only applies that found
        their name taken."""
        results = await asyncio.gather(
            *(self._apply_child(obj, child_key(obj) in owned_elsewhere) for obj, _ in todo), return_exceptions=True
        )
        retry: RetryLater | None = None
        taken: list[tuple[dict[str, Any], str]] = []
        for (obj, sent), result in zip(todo, results, strict=True):
            key_of = child_key(obj)
            if isinstance(result, NotLeader):
                raise result
            if isinstance(result, KubeError):
                exc = result
                if exc.namespace_terminating:
                    raise _NamespaceTerminating()
                decision = state.claims.get(key_of)
                if exc.status == 409 and decision is not None and decision.action == "absent":
                    taken.append((obj, sent))  # something is at that name: nothing was written
                    continue
                if exc.replaced:
                    retry = retry or RetryLater(f"{obj['kind']}/{obj['metadata']['name']} was replaced during the pass")
                    continue
                if exc.api_missing:
                    state.missing_apis.append(
                        KINDS[obj["kind"]].missing_hint or f"the {obj['kind']} API is not installed"
                    )
                    continue
                if exc.transient and self.queue.failures(state.key) < TRANSIENT_BEFORE_REPORTING:
                    retry = retry or RetryLater(f"{obj['kind']}/{obj['metadata']['name']}: {exc}")
                    continue
                # Permanent, or "transient" for too long (a full Service IP range answers 500 every time): the
                # status must say so while the pass keeps being retried with backoff.
                state.apply_errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc}")
                continue
            if isinstance(result, BaseException):
                raise result
            metrics.OBJECTS_APPLIED.labels(obj["kind"]).inc()
            if key_of not in state.live:
                created.append(f"{obj['kind']} {obj['metadata']['name']}")
            state.live[key_of] = result
            self.cache.put(obj["kind"], result)
            self.applied.record(state.key, obj["kind"], obj["metadata"]["name"], sent, result, SentKeys.of(obj))
        if retry is not None:
            raise retry
        return taken

    async def _claim_taken(
        self, state: PassState, taken: list[tuple[dict[str, Any], str]]
    ) -> list[tuple[dict[str, Any], str]]:
        """Read and claim the objects found at first-wave names; returns those that are ours, to update (with their
        uid as the precondition)."""
        namespace = state.key[0]
        reads = await asyncio.gather(
            *(self.kube.get(obj["kind"], namespace, obj["metadata"]["name"]) for obj, _ in taken),
            return_exceptions=True,
        )
        again = []
        for (obj, sent), live in zip(taken, reads, strict=True):
            del obj["metadata"]["resourceVersion"]
            decision = self._judge(state, obj, live)
            if decision is None or decision.action == "unknown" or decision.action == "conflict":
                continue
            if decision.action == "create":  # deleted again since the 409: the next pass creates it
                raise RetryLater(f"{obj['kind']}/{obj['metadata']['name']} was deleted during the pass")
            if isinstance(live, dict):
                state.live[child_key(obj)] = live
            obj["metadata"]["uid"] = decision.uid
            again.append((obj, sent))
        return again

    async def _apply_child(self, obj: dict[str, Any], owned_elsewhere: bool) -> dict[str, Any]:
        if not owned_elsewhere:
            return await self.kube.apply(obj)
        metadata = obj["metadata"]
        current = await self.kube.get(obj["kind"], metadata["namespace"], metadata["name"])
        action = replicas_action(True, int(obj["spec"].get("replicas", 1)), current)
        if current is not None and action.hand_over is not None:
            await self.kube.apply(replicas_patch(obj, action.hand_over), manager=REPLICAS_MANAGER)
        if not action.include_in_main_apply:
            obj["spec"].pop("replicas", None)
        applied = await self.kube.apply(obj)
        if current is None and action.hand_over is not None:
            applied = await self.kube.apply(replicas_patch(obj, action.hand_over), manager=REPLICAS_MANAGER)
        return applied

    async def _prune(self, state: PassState) -> None:
        """Delete children that are ours (our controller reference) and no longer desired."""
        namespace = state.key[0]
        pruned: list[str] = []
        for stale in select_prunable(state.desired, list(state.live.values()), state.owner["metadata"]["uid"]):
            kind, name = child_key(stale)
            try:
                await self.kube.delete(kind, namespace, name, stale["metadata"].get("uid"))
            except KubeError as exc:
                if exc.transient:
                    raise RetryLater(str(exc)) from exc
                state.apply_errors.append(f"deleting {kind}/{name}: {exc}")
                continue
            metrics.OBJECTS_PRUNED.labels(kind).inc()
            pruned.append(f"{kind} {name}")
            state.live.pop((kind, name), None)
            self.cache.delete(kind, namespace, name)
            self.applied.drop(state.key, kind, name)
        if pruned:
            state.notices.append(Notice("Normal", "Pruned", f"deleted {', '.join(pruned)}"))

    async def _observe(self, state: PassState, spec: DisaggDeploymentSpec) -> None:
        """What the children's pods say, and the scaler's step (which may change replicas)."""
        state.pods = self.cache.owned(POD.name, *state.key)
        if self.autoscaler is not None:
            memory = (state.owner.get("status") or {}).get(SCALER_STATE)
            self.autoscaler.restore(state.key, memory, interval_seconds(spec))
        rollout = ((state.owner.get("status") or {}).get("rollout") or {}).get("state")
        hold = f"a rollout of the pairing revision is {rollout}" if rollout in ("RollingOut", "Stuck") else None
        state.scaling = await self._scale(state.key, spec, state.plan, state.live, state.pods, state.apply_errors, hold)
        state.notices += state.scaling.notices
        for (kind, name), obj in state.live.items():  # what the scaler wrote, for the next pass
            if obj["metadata"].get("resourceVersion") != self.cache.version(kind, state.key[0], name):
                self.cache.put(kind, obj)
        state.serving = await self._check_serving(state)
        if state.serving is not None:
            state.notices += state.serving.notices

    async def _check_serving(self, state: PassState) -> ServingReport | None:
        if self.serving is None:
            return None
        try:
            pods = self._own_pods(state)
            self.serving.restore(state.key, (state.owner.get("status") or {}).get("serving"))
            report = await self.serving.step(state.key, state.plan, state.live, pods, self.clock(), state.held)
        except KubeError as exc:
            if exc.transient:
                raise RetryLater(f"serving check: {exc}") from exc
            state.apply_errors.append(f"serving check: {exc}")
            return None
        if report.due_in is not None:
            self.queue.add_after(state.key, report.due_in)
        generation = state.owner["metadata"].get("generation")
        if report.rollout is not None:
            if state.held is not None:
                report.rollout = {**report.rollout, "rolledBackGeneration": generation, "rolledBackTo": state.held}
            elif (
                to := report.rollout.pop("rollbackTo", None)
            ) is not None and state.plan.serving.on_stuck == "Rollback":
                report.rollout = {**report.rollout, "rolledBackGeneration": generation, "rolledBackTo": to}
                report.notices.append(
                    Notice(
                        "Warning",
                        "RollingBack",
                        f"the rollout is stuck; going back to pairing revision {to} (spec.serving.rollout.onStuck: "
                        "Rollback); it holds until the spec changes",
                    )
                )
                self.queue.add(state.key)  # the next pass applies the previous templates
        return report

    def _own_pods(self, state: PassState) -> list[dict[str, Any]]:
        """The cached pods that belong to this DisaggDeployment's own workloads (health/pods.py owned_pods): the
        serving check patches, probes and deletes only those."""
        if state.plan.serving.mode == "Off":
            return state.pods
        uid = state.owner["metadata"]["uid"]
        ours = {
            key: obj
            for key, obj in state.live.items()
            if key[0] in ("Deployment", "LeaderWorkerSet") and controller_uid(obj) == uid
        }
        deployments = [obj["metadata"]["uid"] for (kind, _), obj in ours.items() if kind == "Deployment"]
        # ReplicaSets come from the watch cache like the pods (an informer kind of their own, D143).
        replica_sets = self.cache.owned(REPLICA_SET.name, *state.key) if deployments else []
        sets = [name for kind, name in ours if kind == "LeaderWorkerSet"]
        return owned_pods(state.pods, deployments, sets, replica_sets)

    def _status_inputs(self, state: PassState) -> StatusInputs:
        return StatusInputs(
            state.owner["metadata"].get("generation"),
            state.owner.get("status") or {},
            self.clock(),
            plan=state.plan,
            live=state.live,
            apply_errors=state.apply_errors,
            missing_apis=state.missing_apis,
            conflicts=state.conflicts,
            pods=state.pods,
            scaling_condition=state.scaling.condition,
            last_scale=state.scaling.last_scale,
            **_serving_inputs(state.serving),
        )

    def _children(self, namespace: str, name: str) -> dict[ChildKey, dict[str, Any]]:
        live: dict[ChildKey, dict[str, Any]] = {}
        for kind in CHILD_KINDS:
            for item in self.cache.owned(kind.name, namespace, name):
                live[child_key(item)] = item
        return live

    async def _scale(
        self,
        key: Key,
        spec: DisaggDeploymentSpec,
        plan: DeploymentPlan,
        live: dict[ChildKey, dict[str, Any]],
        pods: list[dict[str, Any]],
        apply_errors: list[str],
        hold: str | None = None,
    ) -> ScaleReport:
        """`hold`: why scale-downs wait (a rollout of the pairing revision in progress), or None."""
        if self.autoscaler is None:
            return ScaleReport()
        try:
            report = await self.autoscaler.step(key, spec, plan, live, pods, self.clock(), hold)
        except KubeError as exc:
            if exc.transient:
                raise RetryLater(f"scaling: {exc}") from exc
            apply_errors.append(f"scaling: {exc}")
            report = ScaleReport()
        if scaled_pools(spec):
            self.queue.add_after(key, interval_seconds(spec))  # come back when the next evaluation is due
        return report

    async def _publish(
        self, owner: dict[str, Any], report: StatusReport, notices: list[Notice], state: PassState | None = None
    ) -> None:
        """The status step, then the events step: events only once the status they describe is written."""
        if state is not None and self.autoscaler is not None:
            memory = self.autoscaler.memory(state.key)
            if memory is not None:
                report.status[SCALER_STATE] = memory
        if state is not None:
            fingerprint = self.applied.fingerprint(state.key)
            if fingerprint is not None:
                report.status[APPLIED_DIGEST] = fingerprint
        if not await self._write_status(owner, report):
            return
        # The metric follows the status at once, not after the (slower, best-effort) events.
        self._set_phase((owner["metadata"]["namespace"], owner["metadata"]["name"]), report.phase)
        await self._record_events(owner, [*notices, *notices_for(report.transitions)])

    async def _write_status(self, owner: dict[str, Any], report: StatusReport) -> bool:
        """Patch status when it changed, as stored (with the CRD's defaults, D252). False when the DisaggDeployment
        is gone."""
        previous = owner.get("status") or {}
        if stored_status(report.status) == previous:
            return True
        patch: dict[str, Any] = {key: None for key in previous if key not in report.status}
        patch.update(report.status)
        try:
            stored = await self.kube.patch_status(owner["metadata"]["namespace"], owner["metadata"]["name"], patch)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise RetryLater(f"status: {exc}") from exc
        if stored:
            self.cache.put(DISAGG_DEPLOYMENT.name, stored)
        return True

    async def _record_events(self, owner: dict[str, Any], notices: list[Notice]) -> None:
        """Concurrently: a pass's events are independent, and one round trip instead of one per event shortens
        every pass that reports (a new DisaggDeployment's has two)."""
        now = self.clock()
        namespace = owner["metadata"]["namespace"]
        results = await asyncio.gather(
            *(self.kube.create_event(namespace, event_object(owner, notice, now, self.instance)) for notice in notices),
            return_exceptions=True,
        )
        for notice, result in zip(notices, results, strict=True):
            if isinstance(result, KubeError):  # events are best effort; status already says it all
                log.warning(
                    "could not record event %s for %s/%s: %s",
                    notice.reason,
                    namespace,
                    owner["metadata"]["name"],
                    result,
                )
            elif isinstance(result, BaseException):
                raise result

    def _set_phase(self, key: Key, phase: str | None) -> None:
        """Record a DisaggDeployment's phase (None: it is gone) and export the counts that changed; counted as they
        change, not over every DisaggDeployment on every pass."""
        before = self.phases.pop(key, None)
        if phase is not None:
            self.phases[key] = phase
        if before == phase:
            return
        for name, change in ((before, -1), (phase, 1)):
            if name is not None:
                self._phase_counts[name] = self._phase_counts.get(name, 0) + change
                metrics.DEPLOYMENTS_BY_PHASE.labels(name).set(self._phase_counts[name])


def _serving_inputs(report: ServingReport | None) -> dict[str, Any]:
    if report is None:
        return {}
    return {
        "serving_mode": report.mode,
        "serving_condition": report.condition,
        "serving_status": report.status,
        "serving_engines": report.serving_engines,
        "rollout": report.rollout,
        "serving_degraded": report.degraded,
    }


def _degraded(owner: dict[str, Any]) -> dict[str, Any] | None:
    """The last status's Degraded condition, when it is True."""
    for condition in (owner.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Degraded" and condition.get("status") == "True":
            return dict(condition)
    return None


def _degraded_message(owner: dict[str, Any]) -> str:
    """What the last status said was wrong, so a conflict already reported is not reported again as an event."""
    condition = _degraded(owner)
    return str(condition.get("message", "")) if condition else ""
