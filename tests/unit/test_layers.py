"""The import-layer contract: the pure core stays pure, every layer imports only what sits beneath it, and
sibling layers never import each other.

Read from the source with `ast`, so a forbidden import fails here even if the code path never runs in a test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "operator" / "disagg"
ALLOWED: dict[str, set[str]] = {
    "names": set(),
    "api": {"names"},
    "plan": {"names", "api"},
    "render": {"names", "api", "plan"},
    "scaling": {"names", "api"},
    "health": {"names", "api"},
    "metrics_sources": {"names", "api", "scaling"},
    "frontend": {"names"},
    "reconcile": {"names", "api", "plan", "render", "scaling", "metrics_sources", "health"},
    "cli": {"names", "api", "plan", "render", "scaling", "metrics_sources", "health", "frontend", "reconcile"},
}
"""The house, floor by floor: each layer and the layers it may import (besides itself). `names` is the ground
floor; `plan` -> `render` build objects and `scaling` decides replicas, side by side on `api`; `metrics_sources`
(the scrapers that build scaling's observations) stands on `scaling`; the shell
(`reconcile`, then `cli`) stands on all of them. `health` (the serving check's verdicts, admissions and remediation)
stands on `api` beside them too. `frontend` (the P/D frontend, a serving process of its own) stands on `names`
beside them, and only `cli` starts it."""
LAYER_OF_MODULE = {"disagg.frontend.contract": "names"}
"""The frontend's pod contract (the labels and annotations engine pods carry) belongs with the names: the planner
renders it and may import it, and it imports nothing but `names`."""
INDEPENDENT = [
    ("plan", "scaling"),
    ("render", "scaling"),
    ("plan", "metrics_sources"),
    ("render", "metrics_sources"),
    ("frontend", "metrics_sources"),
    ("frontend", "plan"),
    ("frontend", "render"),
    ("frontend", "scaling"),
    ("frontend", "reconcile"),
    ("health", "plan"),
    ("health", "render"),
    ("health", "scaling"),
    ("health", "frontend"),
    ("health", "metrics_sources"),
]
"""Siblings: neither imports the other, in either direction."""
OUTSIDE_THE_LAYERS = {"__init__.py", "__main__.py", "py.typed"}
PURE = [
    "names",
    "api",
    "plan",
    "render",
    "scaling",
    "metrics_sources/source",
    "metrics_sources/pods",
    "metrics_sources/promtext",
    "metrics_sources/window",
    "health",
    "frontend/contract",
    "frontend/config",
    "frontend/selection",
    "frontend/flows",
    "frontend/conversations",
    "frontend/probe",
    "frontend/moriio",
    "frontend/sse",
    "frontend/codec",
]
"""The pure core: no clients, no network, no clock, no randomness, no environment, no processes."""
FRONTEND_SHELL = ["app", "client", "discovery", "metrics", "registry", "server"]
"""The frontend's thin shell: HTTP server and client, the kr8s watch, the ZMQ listener, Prometheus, wiring."""
PURE_EXCEPTIONS = {"prometheus_client.parser"}
"""The text-format parser is a pure function; the rest of prometheus_client holds registries and servers."""
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


def _source(part: str) -> Path:
    return PACKAGE / part if (PACKAGE / part).is_dir() else PACKAGE / f"{part}.py"


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
    if module in LAYER_OF_MODULE:
        return LAYER_OF_MODULE[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "disagg" and parts[1] in ALLOWED else None


def _imported_layers(layer: str) -> Iterator[tuple[Path, str, str]]:
    for path in _modules(_source(layer)):
        for module in _imports(path):
            target = _layer_of(module)
            if target is not None and target != layer:
                yield path, module, target


def test_every_package_has_its_place_in_the_house() -> None:
    found = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.name not in OUTSIDE_THE_LAYERS}
    found.discard("__pycache__")
    assert found == set(ALLOWED), "a new package must say in ALLOWED which layers it may import"


@pytest.mark.parametrize("layer", list(ALLOWED))
def test_layers_import_only_what_is_beneath_them(layer: str) -> None:
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path, module, target in _imported_layers(layer)
        if target not in ALLOWED[layer]
    ]
    assert offenders == []


@pytest.mark.parametrize(("one", "other"), INDEPENDENT, ids=lambda name: name)
def test_siblings_never_import_each_other(one: str, other: str) -> None:
    crossings = [
        f"{path.relative_to(REPO)} imports {module}"
        for a, b in ((one, other), (other, one))
        for path, module, target in _imported_layers(a)
        if target == b
    ]
    assert crossings == []
    assert other not in ALLOWED[one] and one not in ALLOWED[other]


@pytest.mark.parametrize("part", PURE)
def test_the_pure_core_does_no_io(part: str) -> None:
    assert _source(part).exists(), f"{part} is listed as pure core but does not exist"
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in _modules(_source(part))
        for module in _imports(path)
        if module.split(".")[0] in IMPURE_MODULES and module not in PURE_EXCEPTIONS
    ]
    assert offenders == []


def test_the_frontend_pod_contract_imports_only_names() -> None:
    path = PACKAGE / "frontend" / "contract.py"
    offenders = [m for m in _imports(path) if (layer := _layer_of(m)) is not None and layer != "names"]
    assert offenders == []


def test_every_frontend_module_is_either_pure_core_or_shell() -> None:
    modules = {p.stem for p in (PACKAGE / "frontend").glob("*.py") if p.stem != "__init__"}
    pure = {part.split("/")[1] for part in PURE if part.startswith("frontend/")}
    assert modules == pure | set(FRONTEND_SHELL)
    assert not pure & set(FRONTEND_SHELL)


def test_the_contract_catches_a_violation(tmp_path: Path) -> None:
    sample = PACKAGE / "plan" / "_probe_for_layer_test.py"
    sample.write_text("import time\nfrom ..scaling import policy\nfrom disagg.names import POOLS\n")
    try:
        found = list(_imports(sample))
        assert "time" in found and "disagg.scaling" in found and "disagg.names" in found
        assert [target for path, _, target in _imported_layers("plan") if path == sample] == ["scaling", "names"]
        assert _layer_of("disagg.names") == "names" and "scaling" not in ALLOWED["plan"]
    finally:
        sample.unlink()
