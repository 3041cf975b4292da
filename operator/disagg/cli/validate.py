"""`disagg validate`: run the operator's validation on YAML files, with readable errors and an exit code."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._inputs import FILES_OPTION, describe_problems, load_file


@click.command()
@FILES_OPTION
@click.option("-q", "--quiet", is_flag=True, help="Print only problems.")
def validate(files: tuple[Path, ...], quiet: bool) -> None:
    """Check DisaggDeployments exactly as the operator does. Exits 1 when any is invalid."""
    failed = False
    for path in files:
        for item in load_file(path):
            if isinstance(item, str):
                click.echo(item, err=True)
                failed = True
            elif item.skipped_kind is not None:
                if not quiet:
                    click.echo(f"skipped {item.where}: {item.skipped_kind} is not a DisaggDeployment")
            elif item.deployment is None:
                click.echo(describe_problems(item), err=True)
                failed = True
            elif not quiet:
                click.echo(f"ok {item.where}: DisaggDeployment '{item.name}' is valid")
    sys.exit(1 if failed else 0)
