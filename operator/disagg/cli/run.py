"""`disagg run`: start the operator."""

from __future__ import annotations

import asyncio
import logging

import click


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
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="DisaggDeployments reconciled in parallel.",
)
@click.option(
    "--resync-seconds",
    type=click.FloatRange(5, 86400),
    default=300,
    show_default=True,
    help="How often every DisaggDeployment is reconciled even without an event (drift repair).",
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
    serving_check: str,
    prometheus_urls: tuple[str, ...],
    verbose: bool,
) -> None:
    """Run the operator (in a pod, or locally against the current kubeconfig)."""
    from disagg.reconcile.operator import run_operator  # kopf and the clients load only for this command

    if all_namespaces and namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)  # a line per watch event is noise in production
    for url in prometheus_urls:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint="--prometheus-url")
    asyncio.run(
        run_operator(
            list(namespaces),
            liveness_port or None,
            metrics_port or None,
            workers,
            resync_seconds,
            serving_default=serving_check,  # type: ignore[arg-type]
            prometheus_urls=tuple(prometheus_urls),
        )
    )
