"""Streaming one process into another (docker save | ctr import) and the names containerd gives images."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from e2e.images.build import BuiltImage
from e2e.images.export import containerd_name, ctr_import_argv, stale_refs
from e2e.images.pipes import PipeError, pipe

PY = sys.executable


def test_ctr_import_reads_the_archive_from_stdin_into_the_kubelets_namespace() -> None:
    assert ctr_import_argv("/run/c.sock") == [
        "ctr",
        "--address",
        "/run/c.sock",
        "--namespace",
        "k8s.io",
        "images",
        "import",
        "-",
    ]


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("disagg-vllm-sim:e2e", "docker.io/library/disagg-vllm-sim:e2e"),
        ("someone/img:1", "docker.io/someone/img:1"),
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0", "ghcr.io/disagg-dev/vllm-cpu:0.32.0"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
    ],
)
def test_containerd_names_follow_docker_normalisation(ref: str, name: str) -> None:
    assert containerd_name(ref) == name


def test_pipe_streams_all_bytes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    producer = [PY, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)"]
    consumer = [PY, "-c", f"import sys; open({str(out)!r}, 'wb').write(sys.stdin.buffer.read())"]
    pipe(producer, consumer)
    assert out.read_bytes() == bytes(range(256)) * 4096


def test_a_failing_consumer_fails_the_pipe_with_its_output(tmp_path: Path) -> None:
    producer = [PY, "-c", "import sys; sys.stdout.write('x' * 1_000_000)"]
    consumer = [PY, "-c", "import sys; sys.stdin.read(10); print('ctr: unexpected EOF', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(PipeError, match=r"(?s)exit 3.*ctr: unexpected EOF"):
        pipe(producer, consumer, log=tmp_path / "pipe.log")
    assert "unexpected EOF" in (tmp_path / "pipe.log").read_text()


def test_a_failing_producer_fails_the_pipe_even_if_the_consumer_succeeds() -> None:
    producer = [PY, "-c", "import sys; print('partial'); sys.exit(25)"]
    consumer = [PY, "-c", "import sys; sys.stdin.read()"]
    with pytest.raises(PipeError, match=r"exit 25\) \|"):
        pipe(producer, consumer)


def _engine(key: str) -> BuiltImage:
    return BuiltImage(
        "vllm-cpu",
        f"ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-{key}",
        "ghcr.io/disagg-dev/vllm-cpu:0.32.0",
        "sha256:cfg",
        key,
        reused=False,
        seconds=0.0,
    )


def test_an_import_leaves_no_older_build_of_the_same_image_behind() -> None:
    listed = [
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0", "sha256:new"),
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-aaaaaaaaaaaaaaaa", "sha256:new"),
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-bbbbbbbbbbbbbbbb", "sha256:old"),
        ("sha256:1111", "sha256:old"),  # the CRI's name for the old build
        ("sha256:2222", "sha256:new"),
        ("ghcr.io/disagg-dev/vllm-router:0.1.17-in-cccccccccccccccc", "sha256:router"),
        ("ghcr.io/disagg-dev/vllm-cpu:0.31.0-in-dddddddddddddddd", "sha256:other-release"),
        ("sha256:3333", "sha256:unknown"),
    ]
    assert stale_refs(listed, _engine("aaaaaaaaaaaaaaaa")) == [
        "ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-bbbbbbbbbbbbbbbb",
        "sha256:1111",
    ]


def test_an_older_build_still_named_otherwise_keeps_its_content() -> None:
    listed = [
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-aaaaaaaaaaaaaaaa", "sha256:new"),
        ("ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-bbbbbbbbbbbbbbbb", "sha256:old"),
        ("example.com/pinned:1", "sha256:old"),
        ("sha256:1111", "sha256:old"),
    ]
    assert stale_refs(listed, _engine("aaaaaaaaaaaaaaaa")) == ["ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-bbbbbbbbbbbbbbbb"]
