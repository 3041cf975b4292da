"""`disagg crd`: print the CustomResourceDefinition."""

from __future__ import annotations

import click

from disagg.api.crd import custom_resource_definition
from disagg.api.documents import dump_documents


@click.command()
def crd() -> None:
    """Print the DisaggDeployment CustomResourceDefinition (YAML)."""
    click.echo(dump_documents([custom_resource_definition()]), nl=False)
