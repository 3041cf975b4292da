"""Moving built images out of the private dockerd: `docker save` streamed into a command, e.g. containerd's import.

Nothing is written to disk in between (the engine image alone is several gigabytes).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence

from .build import BuiltImage
from .dockerd import Dockerd
from .pipes import pipe

K8S_NAMESPACE = "k8s.io"  # the containerd namespace the kubelet's CRI uses


def save_into(
    docker: Dockerd, refs: Sequence[str], consumer: Sequence[str], *, consumer_env: Mapping[str, str] | None = None
) -> None:
    """Stream `docker save REF...` (one archive holding every ref's tag) into `consumer`'s standard input."""
    if not refs:
        raise ValueError("save_into needs at least one image reference")
    pipe(docker.command(["save", *refs]), consumer, env=docker.env, consumer_env=consumer_env or dict(os.environ))


def ctr_import_argv(address: str, namespace: str = K8S_NAMESPACE, ctr: str = "ctr") -> list[str]:
    return [ctr, "--address", address, "--namespace", namespace, "images", "import", "-"]


def containerd_name(ref: str) -> str:
    """How containerd names a Docker reference: short names get Docker Hub's `docker.io/library/` prefix."""
    first, sep, _ = ref.partition("/")
    if not sep:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def config_digest_in_containerd(ref: str, address: str, namespace: str = K8S_NAMESPACE, ctr: str = "ctr") -> str | None:
    """The image config digest (= Docker's image id) containerd holds under `ref`, or None if it has none."""
    base = [ctr, "--address", address, "--namespace", namespace]
    listed = subprocess.run(
        [*base, "images", "ls", f"name=={containerd_name(ref)}"], capture_output=True, text=True, check=False
    )
    rows = listed.stdout.splitlines()[1:] if listed.returncode == 0 else []
    if not rows:
        return None
    manifest_digest = rows[0].split()[2]
    content = subprocess.run([*base, "content", "get", manifest_digest], capture_output=True, text=True, check=False)
    if content.returncode != 0:
        return None
    try:
        manifest = json.loads(content.stdout)
    except ValueError:
        return None
    digest = manifest.get("config", {}).get("digest")
    return str(digest) if digest else None


def load_into_containerd(
    docker: Dockerd,
    images: Sequence[BuiltImage],
    address: str,
    *,
    namespace: str = K8S_NAMESPACE,
    ctr: str = "ctr",
) -> list[tuple[BuiltImage, bool]]:
    """Import each image under both its tags; skipped when containerd already holds this exact image.

    Returns (image, imported) pairs.
    """
    results: list[tuple[BuiltImage, bool]] = []
    for image in images:
        present = all(
            config_digest_in_containerd(ref, address, namespace, ctr) == image.image_id
            for ref in (image.ref, image.stable_ref)
        )
        if not present:
            save_into(docker, [image.ref, image.stable_ref], ctr_import_argv(address, namespace, ctr))
        results.append((image, not present))
    return results
