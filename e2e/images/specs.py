"""The images the harness builds: one Dockerfile, context and name each. Names and tags come from where the
operator and the chart decide them, so a default the operator renders always names an image built here."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from disagg.api.frontend import DEFAULT_ROUTER_IMAGE

from .cachekey import keyed_tag

REPO_ROOT = Path(__file__).resolve().parents[2]


def split_ref(ref: str) -> tuple[str, str]:
    """`registry/repo:tag` into repository and tag (a `:` before the last `/` is a registry port)."""
    repository, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repository, tag


def operator_version(pyproject: Path = REPO_ROOT / "pyproject.toml") -> str:
    """The chart's appVersion and the image's VERSION label are this package version."""
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


@dataclass(frozen=True)
class ImageSpec:
    name: str
    repository: str
    tag: str
    dockerfile: str  # relative to the repository root
    context: str  # relative to the repository root
    build_args: tuple[tuple[str, str], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}"

    def keyed_ref(self, key: str) -> str:
        return f"{self.repository}:{keyed_tag(self.tag, key)}"


def all_images() -> tuple[ImageSpec, ...]:
    version = operator_version()
    router_repository, router_tag = split_ref(DEFAULT_ROUTER_IMAGE)
    return (
        ImageSpec(
            "operator",
            "ghcr.io/disagg-dev/disagg-operator",
            version,
            "operator/Dockerfile",
            ".",
            (("VERSION", version),),
        ),
        ImageSpec("router", router_repository, router_tag, "images/vllm-router/Dockerfile", "images/vllm-router"),
        ImageSpec("vllm-sim", "disagg-vllm-sim", "e2e", "images/vllm-sim/Dockerfile", "."),
        ImageSpec("vllm-cpu", "ghcr.io/disagg-dev/vllm-cpu", "0.32.0", "images/vllm-cpu/Dockerfile", "images/vllm-cpu"),
        ImageSpec(
            "mooncake", "ghcr.io/disagg-dev/mooncake", "0.3.13.post1", "images/mooncake/Dockerfile", "images/mooncake"
        ),
    )


def select(names: list[str] | None) -> tuple[ImageSpec, ...]:
    images = all_images()
    if not names:
        return images
    known = {spec.name: spec for spec in images}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown image {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(known[name] for name in dict.fromkeys(names))
