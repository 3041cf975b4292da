"""What the rest of the harness calls: build (or reuse) images, and load them into a containerd.

    from e2e.images import api
    images = api.build(["vllm-cpu", "router"])            # {"vllm-cpu": BuiltImage, ...}
    images = api.build_and_load("/run/.../containerd.sock")  # all four, imported into namespace k8s.io
    images["vllm-cpu"].ref                                   # ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-<16 hex>

Both start the private dockerd if needed and raise (BuildError, DockerdError, PipeError) on any failure.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from . import specs
from .build import BuiltImage, build_images
from .dockerd import Dockerd
from .export import K8S_NAMESPACE, load_into_containerd


def _stderr(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def build(
    names: Sequence[str] | None = None, *, docker: Dockerd | None = None, say: Callable[[str], None] = _stderr
) -> dict[str, BuiltImage]:
    docker = docker or Dockerd()
    docker.up()
    built = build_images(
        docker, specs.select(list(names) if names else None), log_dir=docker.paths.root / "logs", say=say
    )
    return {image.name: image for image in built}


def build_and_load(
    ctr_address: str,
    names: Sequence[str] | None = None,
    *,
    namespace: str = K8S_NAMESPACE,
    ctr: str = "ctr",
    docker: Dockerd | None = None,
    say: Callable[[str], None] = _stderr,
) -> dict[str, BuiltImage]:
    docker = docker or Dockerd()
    images = build(names, docker=docker, say=say)
    for image, imported in load_into_containerd(
        docker, list(images.values()), ctr_address, namespace=namespace, ctr=ctr
    ):
        say(f"{image.name}: {'imported' if imported else 'already in containerd'} ({image.ref})")
    return images
