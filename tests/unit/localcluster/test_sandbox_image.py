"""The pod sandbox image the real node's containerd imports: a valid `docker save` archive, identical bytes for the
same binary (so the import is idempotent), running /pause as nobody."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from e2e.localcluster import sandbox_image

REFERENCE = "registry.k8s.io/pause:3.10"


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_archive_is_a_docker_save_of_one_layer_running_pause_as_nobody(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF pretend static binary")
    archive, image_id = sandbox_image.archive(binary, REFERENCE)
    files = _members(archive)
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [REFERENCE]
    config_bytes = files[manifest["Config"]]
    assert image_id == "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    config = json.loads(config_bytes)
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    (layer_name,) = manifest["Layers"]
    layer = files[layer_name]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (pause,) = tar.getmembers()
        assert pause.name == "pause" and pause.mode == 0o755
        assert tar.extractfile(pause).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_the_same_binary_gives_the_same_bytes_and_another_binary_another_image(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"one")
    first = sandbox_image.archive(binary, REFERENCE)
    binary.touch()  # a new mtime changes nothing
    assert sandbox_image.archive(binary, REFERENCE) == first
    binary.write_bytes(b"two")
    assert sandbox_image.archive(binary, REFERENCE)[1] != first[1]
