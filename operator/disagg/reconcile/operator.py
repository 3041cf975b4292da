"""Wiring: kopf watches the DisaggDeployments, informers watch their children and pods, the leader elector decides
whether this replica reconciles, and the work queue runs the passes. No logic lives here."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import kopf
from kubernetes.aio import client as k8s

from disagg.api.serving import CheckMode
from disagg.names import (
    CHILD_KINDS,
    DISAGG_DEPLOYMENT,
    GROUP,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    POD,
    REPLICA_SET,
    VERSION,
)
from disagg.plan.model import DEFAULT_INSTALLATION, Installation

from . import metrics
from .autoscale import Autoscaler
from .cache import Cache, OwnerKey
from .election import ElectionThread
from .informer import Informer
from .kube import ApiClientTransport, Kube, configuration
from .leader import LeaseConfig
from .prober import HttpProber
from .ratelimit import Throttled
from .reconciler import Reconciler
from .refusals import Refusals
from .serving import ServingChecker

log = logging.getLogger("disagg.operator")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
OWNED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
"""Children and their pods carry the managed-by label, so their watches are filtered by the API server."""


@dataclass(frozen=True)
class Limits:
    """Client-side protection of the API server (D125)."""

    qps: float = 500.0
    burst: int = 500
    in_flight: int = 32


@dataclass(frozen=True)
class RunOptions:
    namespaces: tuple[str, ...] = ()
    liveness_port: int | None = None
    metrics_port: int | None = None
    workers: int = 32
    resync_seconds: float = 300.0
    reapply_seconds: float = 3600.0
    limits: Limits = Limits()
    leader_election: LeaseConfig | None = None
    prometheus_urls: tuple[str, ...] = ()
    """Prometheus base URLs a spec may name as its metrics source (D76)."""
    installation: Installation = DEFAULT_INSTALLATION
    """What this installation supplies to every plan (the frontend's image); its serving_check is replaced by the
    field below."""
    serving_check: CheckMode = "Enforce"
    """The serving check's mode where a spec leaves it unset (`disagg run --serving-check`)."""


def default_identity() -> str:
    """The pod's name, else a unique local name."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    """Where the lease lives: the operator's own namespace."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def build_registry(reconciler: Reconciler, cache: Cache, stop: asyncio.Event | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.cleanup(registry=registry)
    async def stop_workers(**_: Any) -> None:
        # kopf waits for every task in the loop before it returns; stop ours first so it need not wait.
        if stop is not None:
            stop.set()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Our own prefix for everything kopf might write, so we never collide with another kopf operator.
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )
        settings.posting.reporting_component = "disagg-operator"
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.networking.error_backoffs = [1, 2, 5, 10, 20, 30]

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same sources, in the same order, as our own client: the pod's service account, else KUBECONFIG.
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def deployment_changed(*, event: Mapping[str, Any], name: str, namespace: str | None, **_: Any) -> None:
        # async: kopf runs plain functions in a thread pool, and the cache and the work queue belong to the loop.
        if namespace is None:
            return
        raw = dict(event["object"])
        if event.get("type") == "DELETED":
            cache.delete(DISAGG_DEPLOYMENT.name, namespace, name)
            reconciler.forget((namespace, name))
            return
        raw.setdefault("kind", DISAGG_DEPLOYMENT.name)
        raw.setdefault("apiVersion", DISAGG_DEPLOYMENT.api_version)
        if cache.put(DISAGG_DEPLOYMENT.name, raw) or (namespace, name) not in reconciler.known:
            reconciler.request((namespace, name))

    @kopf.on.probe(id="queue", registry=registry)
    async def queue_depth(**_: Any) -> int:
        return len(reconciler.queue)

    return registry


OBSERVED = (POD, REPLICA_SET)
"""Kinds the operator watches but never applies: the pods (status, the serving check) and the pool Deployments'
ReplicaSets (which pod belongs to which of our Deployments, D140, and the pod templates a rollback returns to). Our
pod templates carry the managed-by label, so the Deployment controller's ReplicaSets do too (D143). Optional: a
refused list leaves them empty and the pass runs on (the serving check then acts on no pod)."""


def child_changed(reconciler: Reconciler) -> Any:
    def changed(owner: OwnerKey) -> None:
        # A DisaggDeployment kopf has not reported yet has no pass to run: its own event will request it.
        if owner in reconciler.known:
            reconciler.request(owner)

    return changed


def informers(kube: Kube, cache: Cache, namespaces: tuple[str, ...], reconciler: Reconciler) -> list[Informer]:
    """One per kind and watched namespace. What RBAC refuses them goes to the reconciler's refusals (D151); a change
    in what is refused requests every DisaggDeployment, whose status it may change."""
    scopes: list[str | None] = list(namespaces) or [None]
    return [
        Informer(
            kube,
            cache,
            kind,
            scope,
            OWNED_SELECTOR,
            child_changed(reconciler),
            optional=kind in OBSERVED,
            refusals=reconciler.refusals,
            on_access_changed=reconciler.request_all,
        )
        for kind in (*CHILD_KINDS, *OBSERVED)
        for scope in scopes
    ]


async def lead(
    reconciler: Reconciler,
    elector: ElectionThread | None,
    watched: list[Informer],
    options: RunOptions,
    stop: asyncio.Event,
) -> None:
    """Reconcile while this replica leads: wait for the caches, run the workers, stand down when the lease is lost,
    and campaign again."""
    while not stop.is_set():
        if elector is not None:
            # A standby renders ahead what it would reconcile after a takeover (D193).
            preparing = asyncio.create_task(reconciler.prepare(), name="prepare")
            try:
                acquired = await elector.acquire(stop)
            finally:
                preparing.cancel()
                await asyncio.gather(preparing, return_exceptions=True)
            if not acquired:
                if not stop.is_set():  # the election thread died (it logged why): exit, so the pod is restarted
                    log.error("leader election stopped; the operator exits")
                    stop.set()
                return
        if elector is None or elector.took_over:
            reconciler.forget_writes()
        await _wait_synced(watched, stop)
        if stop.is_set():
            break
        term = asyncio.Event()
        reconciler.request_all()
        workers = asyncio.create_task(reconciler.run(options.workers, options.resync_seconds, term))
        holder = asyncio.create_task(elector.lost(stop) if elector is not None else stop.wait())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({holder, stopping}, return_when=asyncio.FIRST_COMPLETED)
        term.set()
        await workers
        for task in (holder, stopping):
            task.cancel()
        await asyncio.gather(holder, stopping, return_exceptions=True)
        reconciler.stand_down()
    if elector is not None:
        await elector.release()


async def _wait_synced(watched: list[Informer], stop: asyncio.Event) -> None:
    for informer in watched:
        while not informer.synced.is_set() and not stop.is_set():
            try:
                async with asyncio.timeout(1):
                    await informer.synced.wait()
            except TimeoutError:
                continue


async def run_operator(options: RunOptions) -> None:
    """Run the operator until SIGINT/SIGTERM: kopf's watch, the informers, leader election and the reconcile
    workers in one event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if options.metrics_port:
        metrics.serve(options.metrics_port)
    limits = options.limits
    config = await configuration()
    writer = Kube(
        Throttled(
            ApiClientTransport(k8s.ApiClient(config), limits.in_flight), limits.qps, limits.burst, limits.in_flight
        )
    )
    # One connection per informer's watch (each holds its connection for minutes), and room for their relists.
    watches = (len(CHILD_KINDS) + len(OBSERVED)) * max(1, len(options.namespaces))
    watcher = Kube(ApiClientTransport(k8s.ApiClient(config), watches + 8))
    elector = None
    if options.leader_election is not None:
        # Its own thread, loop and connections: renewals wait neither for this loop nor for the rate limits (D152).
        elector = ElectionThread(lambda: Kube(ApiClientTransport(k8s.ApiClient(config), 2)), options.leader_election)
        elector.start()
        writer.may_write = elector.may_write
    identity = options.leader_election.identity if options.leader_election else default_identity()
    cache = Cache()
    autoscaler = Autoscaler(writer, allowed_prometheus=options.prometheus_urls)
    # The serving check writes through `writer` (pod conditions, pod deletes) and so passes the write gate.
    serving = ServingChecker(writer, HttpProber())
    reconciler = Reconciler(
        writer,
        cache,
        instance=identity,
        autoscaler=autoscaler,
        reapply_seconds=options.reapply_seconds,
        installation=replace(options.installation, serving_check=options.serving_check),
        serving=serving,
        refusals=Refusals(),
    )
    watched = informers(watcher, cache, options.namespaces, reconciler)
    registry = build_registry(reconciler, cache, stop)
    liveness = f"http://0.0.0.0:{options.liveness_port}/healthz" if options.liveness_port else None
    where = ", ".join(options.namespaces) if options.namespaces else "all namespaces"
    how = (
        f"leader election on lease {options.leader_election.namespace}/{options.leader_election.name} as {identity}"
        if options.leader_election
        else "no leader election"
    )
    log.info("disagg-operator starting: %s; %s", where, how)

    async def watch() -> None:
        try:
            await kopf.operator(
                registry=registry,
                standalone=True,
                clusterwide=not options.namespaces,
                # Plain names: kopf watches them directly, without the cluster-wide namespace list patterns need.
                namespaces=list(options.namespaces),
                liveness_endpoint=liveness,
                stop_flag=stop,
            )
        finally:
            stop.set()  # kopf takes over SIGINT/SIGTERM; when it stops, the workers stop with it

    tasks = [asyncio.create_task(informer.run(), name=f"informer-{informer.where}") for informer in watched]
    try:
        await asyncio.gather(watch(), lead(reconciler, elector, watched, options, stop))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await autoscaler.close()
        await serving.close()
        if elector is not None:
            await elector.release()  # a no-op unless `lead` failed before it released
        for kube in (writer, watcher):
            await kube.close()
