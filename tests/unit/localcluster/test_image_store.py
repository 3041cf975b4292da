"""The real node's image store: one containerd at a time (the lock), and which root a node's containerd serves."""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path

import pytest
from e2e.localcluster import image_store


@pytest.fixture(autouse=True)
def _own_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISAGG_CACHE_DIR", str(tmp_path / "cache"))


def test_a_second_holder_waits_for_the_first_and_says_why() -> None:
    said: list[str] = []
    acquired = threading.Event()
    first = image_store.acquire_store_lock()

    def second() -> None:
        with image_store.store_lock(said.append):
            acquired.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    time.sleep(0.3)
    assert not acquired.is_set(), "the store was taken while another containerd held it"
    assert said and "image store" in said[0] and str(image_store.store_lock_path()) in said[0]
    image_store.release_store_lock(first)
    assert acquired.wait(5), "the waiter never got the store after its release"
    waiter.join(5)


def test_an_uncontended_holder_says_nothing() -> None:
    said: list[str] = []
    with image_store.store_lock(said.append):
        pass
    assert said == []


def test_the_private_containerd_serves_the_node_store_without_cri(tmp_path: Path) -> None:
    config = tomllib.loads(
        image_store.private_config(image_store.image_store(), tmp_path / "state", tmp_path / "c.sock")
    )
    assert Path(config["root"]) == image_store.image_store()
    assert config["grpc"]["address"] == str(tmp_path / "c.sock")
    assert "io.containerd.grpc.v1.cri" in config["disabled_plugins"]
    # The node unpacks into containerd's default snapshotter; a disabled overlayfs would leave images unpacked
    # for nobody.
    assert "io.containerd.snapshotter.v1.overlayfs" not in config["disabled_plugins"]


def test_served_root_reads_the_root_a_config_names(tmp_path: Path) -> None:
    config = tmp_path / "containerd.toml"
    config.write_text(image_store.private_config(Path("/some/root"), tmp_path / "s", tmp_path / "c.sock"))
    assert image_store.served_root(config) == Path("/some/root")
    assert image_store.served_root(tmp_path / "missing.toml") is None
    config.write_text("root = [")
    assert image_store.served_root(config) is None


def test_no_running_node_means_no_node_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    from e2e.localcluster import realnode

    monkeypatch.setattr(realnode, "owner", lambda: None)
    assert image_store.running_node_socket() is None


def test_the_nodes_containerd_serves_this_store_so_an_import_beside_it_goes_through_its_socket(tmp_path: Path) -> None:
    from e2e.localcluster import realnode
    from e2e.localcluster.components import Layout
    from e2e.localcluster.config import BinDir

    paths = realnode.NodePaths(Layout(tmp_path / "state"))
    config = tmp_path / "node-containerd.toml"
    config.write_text(realnode._containerd_config(paths, BinDir(tmp_path / "bin")))
    assert image_store.served_root(config) == image_store.image_store()
