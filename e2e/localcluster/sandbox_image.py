"""The pod sandbox image, packed from the pause binary build.sh makes (nothing can be pulled here).

The archive is in `docker save` format (manifest.json with RepoTags), which `ctr images import` reads. It is
built deterministically: the same binary gives the same image id, so an import is skipped when it is present.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def _layer(pause_binary: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = pause_binary.read_bytes()
        info = tarfile.TarInfo("pause")
        info.size = len(data)
        info.mode = 0o755
        info.mtime = 0
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def archive(pause_binary: Path, reference: str) -> tuple[bytes, str]:
    """A docker-archive tarball of a one-layer image running /pause as nobody; returns it and the image id."""
    layer = _layer(pause_binary)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "e2e/localcluster/sandbox_image.py", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    layer_path = f"{diff_id.removeprefix('sha256:')}/layer.tar"
    manifest = [{"Config": f"{image_id}.json", "RepoTags": [reference], "Layers": [layer_path]}]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, f"{image_id}.json", config_bytes)
        _add(tar, layer_path, layer)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    return out.getvalue(), f"sha256:{image_id}"
