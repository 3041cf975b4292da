"""kopf wiring: watch DisaggDeployments and their children, and feed the work queue. No logic lives here."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Mapping
from typing import Any

import kopf

from disagg.api.serving import CheckMode
from disagg.names import CHILD_KINDS, GROUP, LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY, PLURAL, VERSION

from . import metrics
from .autoscale import Autoscaler
from .kube import Kube
from .prober import HttpProber
from .reconciler import Reconciler
from .serving import ServingChecker

log = logging.getLogger("disagg.operator")


def build_registry(reconciler: Reconciler, stop: asyncio.Event | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.cleanup(registry=registry)
    def stop_workers(**_: Any) -> None:
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
    def deployment_changed(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
        if namespace is None:
            return
        if type == "DELETED":
            reconciler.forget((namespace, name))
        else:
            reconciler.request((namespace, name))

    def child_changed(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        owner = labels.get(LABEL_DEPLOYMENT)
        if owner and namespace:
            reconciler.request((namespace, owner))

    for kind in CHILD_KINDS:
        kopf.on.event(
            group=kind.group,
            version=kind.version,
            plural=kind.plural,
            labels={LABEL_MANAGED_BY: MANAGED_BY},
            registry=registry,
            id=f"child-{kind.name.lower()}",
        )(child_changed)

    @kopf.on.probe(id="queue", registry=registry)
    def queue_depth(**_: Any) -> int:
        return len(reconciler.queue)

    return registry


async def run_operator(
    namespaces: list[str],
    liveness_port: int | None,
    metrics_port: int | None,
    workers: int,
    resync_seconds: float,
    serving_default: CheckMode = "Enforce",
    prometheus_urls: tuple[str, ...] = (),
) -> None:
    """Run the operator until SIGINT/SIGTERM: kopf's watchers and our reconcile workers in one event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if metrics_port:
        metrics.serve(metrics_port)
    kube = await Kube.connect()
    autoscaler = Autoscaler(kube, allowed_prometheus=prometheus_urls)
    serving = ServingChecker(kube, HttpProber())
    reconciler = Reconciler(
        kube,
        instance=socket.gethostname(),
        autoscaler=autoscaler,
        serving=serving,
        serving_default=serving_default,
    )
    registry = build_registry(reconciler, stop)
    liveness = f"http://0.0.0.0:{liveness_port}/healthz" if liveness_port else None
    log.info("disagg-operator starting: %s", ", ".join(namespaces) if namespaces else "all namespaces")

    async def watch() -> None:
        try:
            await kopf.operator(
                registry=registry,
                standalone=True,
                clusterwide=not namespaces,
                # Plain names: kopf watches them directly, without the cluster-wide namespace list patterns need.
                namespaces=list(namespaces),
                liveness_endpoint=liveness,
                stop_flag=stop,
            )
        finally:
            stop.set()  # kopf takes over SIGINT/SIGTERM; when it stops, the workers stop with it

    try:
        await asyncio.gather(watch(), reconciler.run(workers, resync_seconds, stop))
    finally:
        await autoscaler.close()
        await serving.close()
        await kube.close()
