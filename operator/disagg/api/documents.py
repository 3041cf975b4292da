"""YAML text to documents, strictly: duplicate keys are errors (as in kubectl), positions are kept for messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class Document:
    """One YAML document of a file, with the line it starts on (1-based) for messages."""

    index: int
    line: int
    content: Any


class DocumentError(ValueError):
    """Text that is not valid YAML; `line` and `column` are 1-based when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        return f"{where}{self.message}"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                mark = key_node.start_mark
                raise DocumentError(
                    "a mapping key must be a plain value, not a list or mapping; use a string key",
                    mark.line + 1,
                    mark.column + 1,
                ) from None
            if key in seen:
                mark = key_node.start_mark
                raise DocumentError(
                    f"duplicate key {key!r} (first defined on line {seen[key].start_mark.line + 1}); keep only one",
                    mark.line + 1,
                    mark.column + 1,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_documents(text: str) -> list[Document]:
    """Parse every document of a YAML stream; empty documents are dropped."""
    try:
        loader = _StrictLoader(text)
    except yaml.YAMLError as exc:  # the reader rejects control characters before any parsing
        raise DocumentError(f"not valid YAML: {exc}. Fix: remove control characters from the file") from exc
    documents = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            content = loader.construct_document(node)
            if content is not None:
                documents.append(Document(index=index, line=node.start_mark.line + 1, content=content))
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise DocumentError(
            f"not valid YAML: {problem}. Fix: check quoting, brackets and indentation there",
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        ) from exc
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML: {exc}. Fix: correct the YAML syntax") from exc
    finally:
        loader.dispose()
    return documents


class _BlockDumper(yaml.SafeDumper):
    """Block-style YAML with literal blocks for multi-line strings, in the key order given."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key, as kubectl and Helm output does.
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def dump_documents(documents: list[Any]) -> str:
    """A YAML stream of the documents, separated by `---`, byte-identical for equal input."""
    return "".join(
        "---\n" + yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, width=4096, allow_unicode=True)
        for document in documents
    )
