"""`disagg validate`: run the operator's validation on YAML files, with readable errors and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from disagg.api.documents import DocumentError, load_documents
from disagg.api.errors import Problem
from disagg.api.validate import is_disagg_document, validate_deployment


@click.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML file with one or more DisaggDeployments ('-' reads stdin). Repeatable.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only problems.")
def validate(files: Sequence[Path], quiet: bool) -> None:
    """Check DisaggDeployments exactly as the operator does. Exits 1 when any is invalid."""
    failed = False
    for path in files:
        for line in _validate_file(path):
            ok = line.startswith("ok ") or line.startswith("skipped ")
            failed = failed or not ok
            if not (quiet and ok):
                click.echo(line, err=not ok)
    sys.exit(1 if failed else 0)


def _read(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    return path.read_text(encoding="utf-8")


def _validate_file(path: Path) -> list[str]:
    """Lines to print for one file: `ok ...`/`skipped ...` for good documents, anything else is a failure."""
    try:
        text = _read(path)
    except OSError as exc:
        return [f"{path}: cannot read: {exc.strerror or exc}"]
    try:
        documents = load_documents(text)
    except DocumentError as exc:
        return [f"{path}: {exc}"]
    if not documents:
        return [f"{path}: no YAML documents found"]
    lines = []
    found = False
    for document in documents:
        where = f"{path} (document {document.index + 1}, line {document.line})"
        if not is_disagg_document(document.content):
            kind = document.content.get("kind", "?") if isinstance(document.content, dict) else "?"
            lines.append(f"skipped {where}: {kind} is not a DisaggDeployment")
            continue
        found = True
        result = validate_deployment(document.content)
        name = _name_of(document.content)
        if result.ok:
            lines.append(f"ok {where}: DisaggDeployment {name} is valid")
        else:
            lines.append(_format_problems(f"{where}: DisaggDeployment {name} is invalid", result.problems))
    if not found:
        lines.append(f"{path}: no DisaggDeployment found")
    return lines


def _name_of(document: object) -> str:
    if isinstance(document, dict) and isinstance(document.get("metadata"), dict):
        return repr(document["metadata"].get("name", "?"))
    return "'?'"


def _format_problems(heading: str, problems: Sequence[Problem]) -> str:
    return "\n".join([heading, *(f"  - {problem}" for problem in problems)])
