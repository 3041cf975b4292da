"""The import-layer contract: the pure core stays pure, and every layer imports only the layers beneath it.

Read from the source with `ast`, so a forbidden import fails here even if the code path never runs in a test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "operator" / "disagg"
LAYERS = ["api", "plan", "render", "scaling", "metrics_sources", "reconcile", "cli"]
"""Bottom to top: a module may import its own layer and the layers before it, never one after it."""
PURE = [
    "api",
    "plan",
    "render",
    "scaling",
    "metrics_sources/source",
    "metrics_sources/pods",
    "metrics_sources/promtext",
    "metrics_sources/window",
]
PURE_EXCEPTIONS = {"prometheus_client.parser"}
"""The text-format parser is a pure function; the rest of prometheus_client holds registries and servers."""
"""The pure core: no clients, no network, no clock, no randomness, no environment, no processes."""
IMPURE_MODULES = {
    "kopf",
    "kr8s",
    "kubernetes",
    "aiohttp",
    "httpx",
    "requests",
    "urllib",
    "socket",
    "http",
    "asyncio",
    "subprocess",
    "random",
    "secrets",
    "uuid",
    "time",
    "threading",
    "multiprocessing",
    "os",
    "prometheus_client",
}


def _modules(under: Path) -> Iterator[Path]:
    if under.suffix == ".py":
        yield under
    elif under.is_dir():
        yield from sorted(under.rglob("*.py"))


def _imports(path: Path) -> Iterator[str]:
    package = ".".join(["disagg", *path.relative_to(PACKAGE).with_suffix("").parts])
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield ".".join([*base, node.module] if node.module else base)
            else:
                yield node.module or ""


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "disagg" and parts[1] in LAYERS else None


def test_the_package_has_the_documented_layers() -> None:
    assert (PACKAGE / "api").is_dir()


@pytest.mark.parametrize("layer", [layer for layer in LAYERS if (PACKAGE / layer).exists()])
def test_layers_import_only_downwards(layer: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in _modules(PACKAGE / layer)
        for module in _imports(path)
        if (target := _layer_of(module)) is not None and target not in allowed
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "part", [part for part in PURE if (PACKAGE / part).exists() or (PACKAGE / f"{part}.py").exists()]
)
def test_the_pure_core_does_no_io(part: str) -> None:
    target = PACKAGE / part if (PACKAGE / part).exists() else PACKAGE / f"{part}.py"
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in _modules(target)
        for module in _imports(path)
        if module.split(".")[0] in IMPURE_MODULES and module not in PURE_EXCEPTIONS
    ]
    assert offenders == []


def test_the_contract_catches_a_violation(tmp_path: Path) -> None:
    sample = PACKAGE / "api" / "_probe_for_layer_test.py"
    sample.write_text("import time\nfrom ..cli import main\n")
    try:
        found = list(_imports(sample))
        assert "time" in found and "disagg.cli" in found
        assert _layer_of("disagg.cli") == "cli"
    finally:
        sample.unlink()
