"""`disagg frontend`: run the operator's P/D frontend (the DisaggDeployment's OpenAI-compatible endpoint)."""

from __future__ import annotations

import click

from disagg.frontend.flows import FLOWS
from disagg.frontend.selection import POLICIES, REVISION_POLICIES


def _labels(values: tuple[str, ...], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, label = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint=option)
        out[key] = label
    return out


@click.command("frontend")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to serve the OpenAI API on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="OpenAI API port.")
@click.option(
    "--admin-port",
    type=click.IntRange(0, 65535),
    default=8001,
    show_default=True,
    help="Port of the admin API (/disagg/v1/probe, drain, pairs) and metrics; 0 serves it on --port.",
)
@click.option("--flow", type=click.Choice(FLOWS), default="pull", show_default=True, help="The P/D flow to drive.")
@click.option(
    "--render/--no-render",
    default=False,
    show_default=True,
    help="Render tier: render -> generate on --tokens-only engines -> derender.",
)
@click.option(
    "--discovery",
    type=click.Choice(["kubernetes", "static", "moriio-registration"]),
    default="kubernetes",
    show_default=True,
    help="Where engines come from: pods (kr8s watch), --prefill/--decode/--render URLs, or MoRI-IO heartbeats.",
)
@click.option(
    "--namespace", envvar="POD_NAMESPACE", default="default", show_default=True, help="Namespace of the pods."
)
@click.option("--deployment", help="DisaggDeployment name: selects its pods by disagg.dev/deployment and role.")
@click.option("--prefill-selector", multiple=True, metavar="KEY=VALUE", help="Label of prefill pods (repeatable).")
@click.option("--decode-selector", multiple=True, metavar="KEY=VALUE", help="Label of decode pods (repeatable).")
@click.option("--render-selector", multiple=True, metavar="KEY=VALUE", help="Label of render pods (repeatable).")
@click.option(
    "--engine-port",
    type=click.IntRange(1, 65535),
    default=8000,
    show_default=True,
    help="Engine API port when a pod has no disagg.dev/http-port annotation.",
)
@click.option("--prefill", "prefill_urls", multiple=True, metavar="URL[,k=v]", help="Static prefill engine.")
@click.option("--decode", "decode_urls", multiple=True, metavar="URL[,k=v]", help="Static decode engine.")
@click.option("--render-url", "render_urls", multiple=True, metavar="URL", help="Static render server.")
@click.option(
    "--moriio-registration",
    default="tcp://0.0.0.0:36367",
    show_default=True,
    help="ZMQ address MoRI-IO engines register with (kv_connector_extra_config proxy_ip:proxy_ping_port).",
)
@click.option("--prefill-policy", type=click.Choice(POLICIES), default="round_robin", show_default=True)
@click.option(
    "--decode-policy",
    type=click.Choice(POLICIES),
    default=None,
    help="Default: consistent_hash for bidirectional (conversations stay on one decode engine), else round_robin.",
)
@click.option(
    "--revision-policy",
    type=click.Choice(REVISION_POLICIES),
    default="capacity",
    show_default=True,
    help="With two pairing revisions live: split by pair capacity, or send all to the newest complete one.",
)
@click.option(
    "--conversation-ttl",
    type=click.FloatRange(0.1, 86400),
    default=450.0,
    show_default=True,
    help="Seconds a conversation's decode KV params are kept (bidirectional).",
)
@click.option(
    "--decoder-blocks-ttl",
    type=click.FloatRange(0.1, 86400),
    default=480.0,
    show_default=True,
    help="The engines' decoder_kv_blocks_ttl; --conversation-ttl must stay below it.",
)
@click.option("--max-conversations", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
@click.option("--request-timeout", type=click.FloatRange(0.1, 86400), default=600.0, show_default=True)
@click.option("--prefill-timeout", type=click.FloatRange(0.1, 86400), default=300.0, show_default=True)
@click.option("--connect-timeout", type=click.FloatRange(0.01, 600), default=5.0, show_default=True)
@click.option("--model", help="Served model name for /v1/models when no engine answers it.")
@click.option(
    "--drain-seconds",
    type=click.FloatRange(1, 86400),
    default=300.0,
    show_default=True,
    help="Default lifetime of a pair drain.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def frontend(**options: object) -> None:
    """Serve the OpenAI API for a prefill/decode deployment, driving the flow vllm-router cannot."""
    from disagg.frontend.app import run

    selectors = {
        role: _labels(options.pop(f"{role}_selector"), f"--{role}-selector")  # type: ignore[arg-type]
        for role in ("prefill", "decode", "render")
    }
    try:
        run(selectors=selectors, **options)  # type: ignore[arg-type]
    except ValueError as e:
        raise click.ClickException(str(e)) from e
