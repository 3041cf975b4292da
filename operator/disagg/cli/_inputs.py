"""Reading DisaggDeployments from files for the CLI, with the same validation the operator runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from disagg.api.deployment import DisaggDeployment
from disagg.api.documents import DocumentError, load_documents
from disagg.api.errors import Problem
from disagg.api.validate import is_disagg_document, validate_deployment
from disagg.plan.model import DEFAULT_FRONTEND_IMAGE

FRONTEND_IMAGE_OPTION = click.option(
    "--frontend-image",
    envvar="DISAGG_FRONTEND_IMAGE",
    default=DEFAULT_FRONTEND_IMAGE,
    show_default=True,
    help="Image of the P/D frontend (disagg frontend) for DisaggDeployments that do not name one: the operator's "
    "own image (the Helm chart sets it to the image it installs).",
)
FILES_OPTION = click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML file with one or more DisaggDeployments ('-' reads stdin). Repeatable.",
)


@dataclass(frozen=True)
class Loaded:
    """One document of an input file: where it is, and either the validated deployment or why not."""

    where: str
    deployment: DisaggDeployment | None
    problems: list[Problem]
    skipped_kind: str | None = None
    name: str = "?"


def read_text(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    return path.read_text(encoding="utf-8")


def load_file(path: Path) -> Iterator[Loaded | str]:
    """Yield each document of the file, or a string describing a file-level error."""
    try:
        text = read_text(path)
    except OSError as exc:
        yield f"{path}: cannot read: {exc.strerror or exc}"
        return
    try:
        documents = load_documents(text)
    except DocumentError as exc:
        yield f"{path}: {exc}"
        return
    if not documents:
        yield f"{path}: no YAML documents found"
        return
    found = False
    for document in documents:
        where = f"{path} (document {document.index + 1}, line {document.line})"
        content = document.content
        if not is_disagg_document(content):
            kind = content.get("kind", "?") if isinstance(content, dict) else "?"
            yield Loaded(where, None, [], skipped_kind=str(kind))
            continue
        found = True
        result = validate_deployment(content)
        name = "?"
        if isinstance(content, dict) and isinstance(content.get("metadata"), dict):
            name = str(content["metadata"].get("name", "?"))
        yield Loaded(where, result.deployment, result.problems, name=name)
    if not found:
        yield f"{path}: no DisaggDeployment found"


def describe_problems(loaded: Loaded) -> str:
    lines = [f"{loaded.where}: DisaggDeployment '{loaded.name}' is invalid"]
    lines += [f"  - {problem}" for problem in loaded.problems]
    return "\n".join(lines)


def load_valid(files: tuple[Path, ...] | list[Path]) -> list[DisaggDeployment]:
    """Every DisaggDeployment in the files, or print all problems to stderr and exit 1."""
    deployments = []
    failed = False
    for path in files:
        for item in load_file(path):
            if isinstance(item, str):
                click.echo(item, err=True)
                failed = True
            elif item.skipped_kind is None:
                if item.deployment is None:
                    click.echo(describe_problems(item), err=True)
                    failed = True
                else:
                    deployments.append(item.deployment)
    if failed:
        sys.exit(1)
    return deployments
