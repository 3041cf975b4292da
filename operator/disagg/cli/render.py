"""`disagg render`: print the exact objects the operator would apply, with no cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from disagg.api.documents import dump_documents
from disagg.plan import build_plan
from disagg.plan.model import Installation
from disagg.render import render_plan

from ._inputs import FILES_OPTION, FRONTEND_IMAGE_OPTION, load_valid


@click.command()
@FILES_OPTION
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: a stream of documents; json: a v1 List, as kubectl prints.",
)
@click.option(
    "-n", "--namespace", default=None, help="Namespace of the objects. Default: the DisaggDeployment's, else 'default'."
)
@FRONTEND_IMAGE_OPTION
def render(files: tuple[Path, ...], output: str, namespace: str | None, frontend_image: str) -> None:
    """Render the Kubernetes objects for DisaggDeployments (deterministic, byte-identical across runs).

    Invalid input prints the validation problems and exits 1, exactly like `disagg validate`.
    """
    objects: list[dict[str, Any]] = []
    for deployment in load_valid(files):
        target = namespace or deployment.metadata.namespace or "default"
        objects += render_plan(build_plan(deployment, target, Installation(frontend_image=frontend_image)))
    if output == "json":
        listing = {"apiVersion": "v1", "kind": "List", "items": objects}
        click.echo(json.dumps(listing, indent=2))
    else:
        click.echo(dump_documents(objects), nl=False)
