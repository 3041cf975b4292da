"""Build the images and import each into the real node's image store as soon as it is built, cluster or not.

Cold, `make test` runs this in the background while it compiles the control plane, so the real-engine tier finds
the engine image already in the node's store instead of spending minutes importing it after the cluster is up.
Each import runs beside the next image's build (one waits on the disk, the other mostly on the network), and
holds the store only for that image, so a cluster starting meanwhile waits for one import at most.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Callable, Sequence

from e2e.localcluster import image_store

from .build import BuiltImage, build_images
from .dockerd import Dockerd
from .export import load_into_containerd
from .pipes import PipeError
from .specs import ImageSpec

_DONE = None


class PreloadError(RuntimeError):
    pass


def preload(docker: Dockerd, specs: Sequence[ImageSpec], say: Callable[[str], None]) -> list[BuiltImage]:
    """Build (or reuse) `specs` in order and import each into the node's store; raises if any step failed."""
    pending: queue.Queue[BuiltImage | None] = queue.Queue()
    failures: list[str] = []

    def importer() -> None:
        while (image := pending.get()) is not _DONE:
            try:
                with image_store.open_store(say) as address:
                    ((_, imported),) = load_into_containerd(docker, [image], address)
                say(f"{image.name}: {'imported into' if imported else 'already in'} the real node's image store")
            except (image_store.StoreError, PipeError, OSError, subprocess.SubprocessError) as exc:
                failures.append(f"{image.name}: {exc}")
                say(f"{image.name}: import into the real node's image store failed: {exc}")

    worker = threading.Thread(target=importer, name="image-import", daemon=True)
    worker.start()
    try:
        built = build_images(docker, specs, log_dir=docker.paths.root / "logs", say=say, on_built=pending.put)
    finally:
        pending.put(_DONE)
        worker.join()
    if failures:
        raise PreloadError("; ".join(failures))
    return built
