"""`disagg run`: start the operator."""

from __future__ import annotations

import asyncio
import logging

import click

from disagg.plan.model import Installation

from ._inputs import FRONTEND_IMAGE_OPTION


@click.command()
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch only this namespace (repeatable). Default: all namespaces.",
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch every namespace (the default).")
@click.option(
    "--liveness-port",
    type=int,
    default=8081,
    show_default=True,
    help="Port of the /healthz liveness endpoint; 0 disables it.",
)
@click.option(
    "--metrics-port",
    type=int,
    default=8080,
    show_default=True,
    help="Port of the operator's Prometheus /metrics; 0 disables it.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=32,
    show_default=True,
    help="DisaggDeployments reconciled in parallel (each applies its independent children concurrently).",
)
@click.option(
    "--resync-seconds",
    type=click.FloatRange(5, 86400),
    default=300,
    show_default=True,
    help="How often every DisaggDeployment is reconciled even without an event. Children that did not change since "
    "they were applied are not applied again (see --reapply-seconds).",
)
@click.option(
    "--serving-check",
    type=click.Choice(["Enforce", "Report", "Off"]),
    default="Enforce",
    show_default=True,
    help="The serving check's mode for DisaggDeployments that leave spec.serving.check.mode unset. Off suits "
    "clusters where no engine really runs (fake nodes) or the operator cannot reach pod IPs.",
)
@click.option(
    "--reapply-seconds",
    type=click.FloatRange(60, 7 * 86400),
    default=3600,
    show_default=True,
    help="Apply every child again after this long even when nothing seems to have changed (a missed watch event "
    "cannot hide drift for longer).",
)
@click.option(
    "--kube-api-qps",
    type=click.FloatRange(1, 100000),
    default=500,
    show_default=True,
    help="Client-side limit: requests per second to the API server, on average.",
)
@click.option(
    "--kube-api-burst",
    type=click.IntRange(1, 100000),
    default=500,
    show_default=True,
    help="Client-side limit: requests allowed at once above --kube-api-qps after a quiet spell.",
)
@click.option(
    "--kube-api-in-flight",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    help="Client-side limit: requests to the API server in flight at once.",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=False,
    show_default=True,
    help="Run as one of several replicas: reconcile only while holding the leader Lease (the chart turns it on).",
)
@click.option(
    "--leader-election-namespace",
    default=None,
    help="Namespace of the Lease. Default: $POD_NAMESPACE, else the service account's namespace, else default.",
)
@click.option("--leader-election-id", default="disagg-operator", show_default=True, help="Name of the Lease.")
@click.option(
    "--leader-election-identity",
    default=None,
    help="This replica's name in the Lease. Default: $POD_NAME, else <hostname>-<random>.",
)
@click.option(
    "--lease-duration-seconds",
    type=click.FloatRange(2, 300),
    default=8,
    show_default=True,
    help="How long a Lease that is not renewed keeps others from taking it; a standby takes over within about "
    "this plus two retry periods of the leader's death.",
)
@click.option(
    "--renew-deadline-seconds",
    type=click.FloatRange(1, 300),
    default=6,
    show_default=True,
    help="The leader stops writing when it has not renewed the Lease for this long (less than the lease duration).",
)
@click.option(
    "--retry-period-seconds",
    type=click.FloatRange(0.2, 60),
    default=1.5,
    show_default=True,
    help="How often the leader renews and the others try to take the Lease.",
)
@FRONTEND_IMAGE_OPTION
@click.option(
    "--prometheus-url",
    "prometheus_urls",
    multiple=True,
    envvar="DISAGG_PROMETHEUS_URLS",
    help="Base URL of a Prometheus that DisaggDeployments may name in spec.scaling.metrics.prometheus.url "
    "(repeatable; the variable takes a space-separated list). No other URL is ever contacted. Default: none.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness_port: int,
    metrics_port: int,
    workers: int,
    resync_seconds: float,
    reapply_seconds: float,
    kube_api_qps: float,
    kube_api_burst: int,
    kube_api_in_flight: int,
    leader_elect: bool,
    leader_election_namespace: str | None,
    leader_election_id: str,
    leader_election_identity: str | None,
    lease_duration_seconds: float,
    renew_deadline_seconds: float,
    retry_period_seconds: float,
    frontend_image: str,
    serving_check: str,
    prometheus_urls: tuple[str, ...],
    verbose: bool,
) -> None:
    """Run the operator (in a pod, or locally against the current kubeconfig)."""
    # kopf and the clients load only for this command
    from disagg.reconcile.leader import LeaseConfig
    from disagg.reconcile.operator import Limits, RunOptions, default_identity, default_namespace, run_operator

    if all_namespaces and namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    lease = None
    if leader_elect:
        try:
            lease = LeaseConfig(
                namespace=leader_election_namespace or default_namespace(),
                name=leader_election_id,
                identity=leader_election_identity or default_identity(),
                lease_seconds=lease_duration_seconds,
                renew_deadline_seconds=renew_deadline_seconds,
                retry_seconds=retry_period_seconds,
            )
        except ValueError as exc:
            raise click.BadParameter(
                f"{exc}: set --retry-period-seconds < --renew-deadline-seconds < --lease-duration-seconds"
            ) from None
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)  # a line per watch event is noise in production
    for url in prometheus_urls:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint="--prometheus-url")
    options = RunOptions(
        namespaces=namespaces,
        liveness_port=liveness_port or None,
        metrics_port=metrics_port or None,
        workers=workers,
        resync_seconds=resync_seconds,
        reapply_seconds=reapply_seconds,
        limits=Limits(kube_api_qps, kube_api_burst, kube_api_in_flight),
        leader_election=lease,
        prometheus_urls=tuple(prometheus_urls),
        installation=Installation(frontend_image=frontend_image),
        serving_check=serving_check,  # type: ignore[arg-type]
    )
    asyncio.run(run_operator(options))
