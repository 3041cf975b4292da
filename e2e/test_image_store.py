"""The real node's image store outside a cluster: what `make test` imports in the background, while it still compiles
the control plane, is in the store, unpacked, when a containerd opens it again; with a cluster up, imports go
through the node's own containerd (two containerds cannot open one root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.localcluster import image_store, realnode, sandbox_image
from e2e.localcluster.components import Layout
from e2e.localcluster.config import REPO_ROOT
from e2e.localcluster.testing import KubeCluster
from e2e.realnode_support import load_images, require_real_node

pytestmark = pytest.mark.e2e
REFERENCE = "disagg-e2e.local/store-probe:1"


def _ctr(address: str, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["ctr", "--address", address, "--namespace", "k8s.io", *args], input=stdin, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def _node_socket() -> str:
    owner = realnode.owner()
    assert owner is not None, "a real node runs but no cluster owns it"
    return str(realnode.NodePaths(Layout(owner)).socket)


def test_an_image_imported_with_no_node_running_is_there_unpacked_when_the_store_opens_again(
    kube_cluster: KubeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_real_node(kube_cluster)  # root, containerd and ctr: what the real node needs
    # Another cache root: the running node serves its own store, so this one is opened by a private containerd.
    monkeypatch.setenv("DISAGG_CACHE_DIR", str(tmp_path / "cache"))
    binary = tmp_path / "probe"
    binary.write_bytes(b"#!/bin/sh\n")
    archive, _ = sandbox_image.archive(binary, REFERENCE)

    with image_store.open_store() as address:
        assert address != _node_socket()
        _ctr(address, "images", "import", "-", stdin=archive)
    assert not Path(address).exists(), "the private containerd outlived the block that opened the store"

    with image_store.open_store() as again:
        listed = _ctr(again, "images", "ls")
        assert REFERENCE in listed
        checked = [line for line in _ctr(again, "images", "check").splitlines() if line.startswith(REFERENCE)]
    # `ctr images check` columns: REF TYPE DIGEST STATUS SIZE UNPACKED; the kubelet's CRI skips unpacked=false.
    assert checked and checked[0].split()[-1] == "true", checked


def test_with_the_node_running_the_store_is_reached_through_the_nodes_containerd(kube_cluster: KubeCluster) -> None:
    require_real_node(kube_cluster)
    with image_store.open_store() as address:
        assert address == _node_socket()
        assert "Server:" in _ctr(address, "version")  # a containerd answers there


def test_the_preload_imports_through_the_running_node_and_finds_what_is_loaded_there(kube_cluster: KubeCluster) -> None:
    require_real_node(kube_cluster)
    sim_ref = load_images("vllm-sim")["vllm-sim"]
    done = subprocess.run(
        [sys.executable, "-m", "e2e.images", "preload", "--only", "vllm-sim"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["vllm-sim", sim_ref]
    assert "vllm-sim: already in the real node's image store" in done.stderr
