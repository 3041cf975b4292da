"""The real node's image store (containerd's root, kept across clusters), reachable with or without a cluster.

Images cannot be pulled here, so every image a real pod runs is imported into this store. Cold, importing the
6.6 GB engine image takes minutes; `open_store` lets that happen before any cluster exists (while `make test`
still compiles the control plane), through a short-lived containerd of its own on the same root, and through the
node's own containerd when a cluster's real node is running.

Two containerds cannot open one root (its metadata database is locked by the first), so `STORE_LOCK` serialises
them: the node's containerd holds it from before it starts until it answers, and `open_store` holds it for as long
as it uses the store. Whoever takes the lock second finds the first one's work done: the node's containerd sees
the images imported before it started (its CRI plugin lists the store's `k8s.io` namespace at start), and an
import after the node started goes through the node's socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from .components import Layout
from .config import cache_root

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0


UNUSED_PLUGINS = (
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
)
"""Plugins neither containerd of the node's store uses: the other snapshotters probe the file system and log noise."""


class StoreError(RuntimeError):
    pass


def image_store() -> Path:
    """containerd's root: kept across clusters, because images cannot be pulled again."""
    return cache_root() / "node" / "containerd"


def store_lock_path() -> Path:
    return cache_root() / "node" / "containerd.lock"


@contextlib.contextmanager
def store_lock(say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the store exclusively; says once when it has to wait for another holder."""
    handle = acquire_store_lock(say)
    try:
        yield
    finally:
        release_store_lock(handle)


def acquire_store_lock(say: Callable[[str], None] | None = None) -> IO[str]:
    path = store_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if say is not None:
            say(f"waiting for the real node's image store ({path} is held: an image import is running)")
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def release_store_lock(handle: IO[str]) -> None:
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def private_config(root: Path, state: Path, socket: Path) -> str:
    """A containerd that only stores images: no CRI plugin (no sandboxes, no CNI), the node's snapshotter.

    The node's containerd (realnode.py) unpacks into the default overlayfs snapshotter too, so what is imported
    here is already unpacked for the kubelet when the node starts.
    """
    return f"""\
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = {json.dumps(["io.containerd.grpc.v1.cri", *UNUSED_PLUGINS])}

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"
"""


def answers(socket: Path) -> bool:
    if not socket.exists():
        return False
    try:
        done = subprocess.run(["ctr", "--address", str(socket), "version"], capture_output=True, timeout=5, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def running_node_socket() -> Path | None:
    """The socket of the real node's containerd if a cluster's real node runs and answers now."""
    from . import realnode  # realnode imports this module for the store's location and lock

    root = realnode.owner()
    if root is None:
        return None
    paths = realnode.NodePaths(Layout(root))
    if served_root(paths.containerd_config) != image_store():
        return None  # a node of another cache root (DISAGG_CACHE_DIR): not this store
    return paths.socket if answers(paths.socket) else None


def served_root(config: Path) -> Path | None:
    """The root a containerd config file names, or None if there is no readable one."""
    try:
        root = tomllib.loads(config.read_text()).get("root")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return Path(root) if isinstance(root, str) else None


@contextlib.contextmanager
def open_store(say: Callable[[str], None] | None = None) -> Iterator[str]:
    """The address of a containerd serving the real node's image store, held exclusively until the block ends:
    the running node's containerd if there is one, else a private one started here and stopped afterwards."""
    if shutil.which("ctr") is None or shutil.which("containerd") is None:
        raise StoreError("containerd and ctr not found; on Debian: apt-get install containerd")
    with store_lock(say):
        node_socket = running_node_socket()
        if node_socket is not None:
            yield str(node_socket)
            return
        with _private_containerd() as socket:
            yield str(socket)


@contextlib.contextmanager
def _private_containerd() -> Iterator[Path]:
    image_store().mkdir(parents=True, exist_ok=True)
    # A short path: unix socket paths are limited to 107 bytes and the cache root can be deep.
    with tempfile.TemporaryDirectory(prefix="disagg-store-") as tmp:
        state = Path(tmp) / "state"
        socket = Path(tmp) / "containerd.sock"
        config = Path(tmp) / "containerd.toml"
        config.write_text(private_config(image_store(), state, socket))
        log = (Path(tmp) / "containerd.log").open("wb")
        proc = subprocess.Popen(
            ["containerd", "--config", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not answers(socket):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (Path(tmp) / "containerd.log").read_text(errors="replace")[-2000:]
                    raise StoreError(f"the image store's containerd did not start (exit {proc.poll()}):\n{tail}")
                time.sleep(0.2)
            yield socket
        finally:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
