"""Moving built images out of the private dockerd: `docker save` streamed into a command, e.g. containerd's import.

Nothing is written to disk in between (the engine image alone is several gigabytes).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence

from .build import BuiltImage
from .cachekey import is_keyed_tag_of
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


def _ctr_argv(address: str, namespace: str, ctr: str, *args: str) -> list[str]:
    return [ctr, "--address", address, "--namespace", namespace, *args]


def _ctr(address: str, namespace: str, ctr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_ctr_argv(address, namespace, ctr, *args), capture_output=True, text=True, check=False)


def ctr_import_argv(address: str, namespace: str = K8S_NAMESPACE, ctr: str = "ctr") -> list[str]:
    return _ctr_argv(address, namespace, ctr, "images", "import", "-")


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
    listed = _ctr(address, namespace, ctr, "images", "ls", f"name=={containerd_name(ref)}")
    rows = listed.stdout.splitlines()[1:] if listed.returncode == 0 else []
    if not rows:
        return None
    manifest_digest = rows[0].split()[2]
    content = _ctr(address, namespace, ctr, "content", "get", manifest_digest)
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


def stale_refs(listed: Sequence[tuple[str, str]], image: BuiltImage) -> list[str]:
    """The names to remove, given containerd's (name, manifest digest) rows, once `image` is imported.

    Older input-keyed tags of the same image, and the `sha256:<id>` names the kubelet's CRI gave each of them,
    once no other name points at that manifest. Without this every rebuild of the 6 GiB engine image stays on disk
    (the kubelet's image GC is off on the real node: it must never drop an image `imagePullPolicy: Never` needs).
    Images of other releases (another tag before `-in-`) and names nothing else of ours made are left alone.
    """
    current = containerd_name(image.ref)
    repository = current.rpartition(":")[0]
    release_tag = containerd_name(image.stable_ref).rpartition(":")[2]
    older = {
        name: digest
        for name, digest in listed
        if name.rpartition(":")[0] == repository
        and is_keyed_tag_of(release_tag, name.rpartition(":")[2])
        and name != current
    }
    kept_digests = {digest for name, digest in listed if name not in older and not name.startswith("sha256:")}
    orphaned = {digest for digest in older.values() if digest not in kept_digests}
    cri_names = [name for name, digest in listed if name.startswith("sha256:") and digest in orphaned]
    return sorted(older) + cri_names


def prune_older_builds(
    images: Sequence[BuiltImage], address: str, namespace: str = K8S_NAMESPACE, ctr: str = "ctr"
) -> list[str]:
    """Remove what `stale_refs` names for each image; returns the removed names.

    Explicit (`load --prune`), never part of an import: checkouts of several branches share the one real node, and
    an image another checkout just loaded for a pod about to start must not disappear under it.
    """
    removed: list[str] = []
    for image in images:
        refs = stale_refs(_listed(address, namespace, ctr), image)
        _remove(refs, address, namespace, ctr)
        removed += refs
    return removed


def _listed(address: str, namespace: str, ctr: str) -> list[tuple[str, str]]:
    listed = _ctr(address, namespace, ctr, "images", "ls")
    rows = [line.split() for line in listed.stdout.splitlines()[1:]] if listed.returncode == 0 else []
    return [(row[0], row[2]) for row in rows if len(row) >= 3]


def _remove(refs: Sequence[str], address: str, namespace: str, ctr: str) -> None:
    if refs:
        _ctr(address, namespace, ctr, "images", "rm", "--sync", *refs)
