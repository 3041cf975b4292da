"""How the harness calls `docker build`, which images it builds, and what it refuses."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from e2e.images.build import BuildError, build_argv, check_bases
from e2e.images.specs import ImageSpec, all_images, select, split_ref

from disagg.api.frontend import DEFAULT_ROUTER_IMAGE
from tests.conftest import REPO

SPEC = ImageSpec("x", "ghcr.io/disagg-dev/x", "1.0", "images/x/Dockerfile", "images/x", (("VERSION", "1.0"),))
KEY = "ab" * 32


def test_build_runs_niced_on_the_host_network_with_both_tags_and_never_pulls() -> None:
    argv = build_argv("/usr/bin/docker", SPEC, KEY, Path("/repo"))
    assert argv[:3] == ["nice", "-n", "10"]
    assert argv[3:5] == ["/usr/bin/docker", "build"]
    assert argv[argv.index("--network") + 1] == "host"
    assert "--pull=false" in argv and "--force-rm" in argv
    tags = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-t"]
    assert tags == ["ghcr.io/disagg-dev/x:1.0-in-abababababababab", "ghcr.io/disagg-dev/x:1.0"]
    assert argv[argv.index("-f") + 1] == "/repo/images/x/Dockerfile"
    assert argv[argv.index("--build-arg") + 1] == "VERSION=1.0"
    assert argv[argv.index("--label") + 1] == f"dev.disagg.inputs={KEY}"
    assert argv[-1] == "/repo/images/x"


def test_a_base_the_harness_cannot_provide_fails_loudly_naming_the_dockerfile() -> None:
    check_bases(SPEC, ["python:3.11-slim-bookworm"])
    with pytest.raises(BuildError, match=r"images/x/Dockerfile: FROM python:3\.12-slim-bookworm cannot be pulled"):
        check_bases(SPEC, ["python:3.11-slim-bookworm", "python:3.12-slim-bookworm"])


def test_image_names_are_the_ones_the_operator_and_chart_use() -> None:
    refs = {spec.name: spec.ref for spec in all_images()}
    chart = yaml.safe_load((REPO / "charts" / "disagg-operator" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "disagg-operator" / "values.yaml").read_text())
    assert refs["router"] == DEFAULT_ROUTER_IMAGE
    assert refs["operator"] == f"{values['image']['repository']}:{chart['appVersion']}"
    assert refs["vllm-cpu"] == "ghcr.io/disagg-dev/vllm-cpu:0.32.0"
    assert refs["vllm-sim"] == "disagg-vllm-sim:e2e"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    operator = next(spec for spec in all_images() if spec.name == "operator")
    assert dict(operator.build_args) == {"VERSION": version}


def test_select_keeps_order_drops_repeats_and_names_unknown_images() -> None:
    assert [s.name for s in select(["vllm-cpu", "router", "vllm-cpu"])] == ["vllm-cpu", "router"]
    assert [s.name for s in select(None)] == [s.name for s in all_images()]
    with pytest.raises(ValueError, match="unknown image nope; known: operator"):
        select(["nope"])


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("ghcr.io/disagg-dev/vllm-router:0.1.17", ("ghcr.io/disagg-dev/vllm-router", "0.1.17")),
        ("localhost:5000/img", ("localhost:5000/img", "latest")),
        ("localhost:5000/img:2", ("localhost:5000/img", "2")),
        ("busybox", ("busybox", "latest")),
    ],
)
def test_split_ref(ref: str, parts: tuple[str, str]) -> None:
    assert split_ref(ref) == parts
