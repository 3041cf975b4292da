"""The `disagg` command line: one module per subcommand, each a thin shell over the pure core."""

from __future__ import annotations

import click

from disagg import __version__

from .crd import crd
from .frontend import frontend
from .plan import plan_command
from .render import render
from .run import run
from .validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="disagg")
def cli() -> None:
    """Deploy and run vLLM prefill/decode disaggregated serving on Kubernetes."""


cli.add_command(crd)
cli.add_command(validate)
cli.add_command(render)
cli.add_command(plan_command)
cli.add_command(run)
cli.add_command(frontend)


def main() -> None:
    cli(prog_name="disagg")
