"""What tests on the real node need: the node itself, the images built here and loaded into its containerd.

Pods meant for the real node tolerate its taint and select it (`placement`); every other pod in the suite keeps
landing on kwok's nodes. Missing prerequisites (no real node, images that do not build) fail in CI and skip with
the reason elsewhere, so the tier never passes by not running.
"""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from typing import Any

import pytest

from e2e.localcluster import realnode
from e2e.localcluster.components import Layout
from e2e.localcluster.config import REPO_ROOT, default_state_dir
from e2e.localcluster.testing import KubeCluster
from e2e.prerequisites import unavailable

NODE_SELECTOR = {"kubernetes.io/hostname": realnode.NODE_NAME}
TOLERATION = {
    "key": realnode.TAINT["key"],
    "operator": "Equal",
    "value": realnode.TAINT["value"],
    "effect": "NoSchedule",
}


def require_real_node(kube: KubeCluster) -> None:
    if not kube.local:
        unavailable("the real-node tier runs on the local control plane's real node (e2e/localcluster)")
    nodes = kube.get("nodes", "-l", f"{realnode.LABEL[0]}={realnode.LABEL[1]}")["items"]
    if not nodes:
        unavailable(
            "the local cluster has no real node: it was started with DISAGG_E2E_REAL_NODE=0 or --without-real-node "
            "(make cluster-down, then make cluster-up as root)"
        )


def placement() -> dict[str, Any]:
    """Pod spec fields that put a pod on the real node."""
    return {"nodeSelector": dict(NODE_SELECTOR), "tolerations": [dict(TOLERATION)]}


def containerd_socket() -> str:
    return str(realnode.NodePaths(Layout(default_state_dir().resolve())).socket)


@cache
def load_images(*names: str) -> dict[str, str]:
    """Build (or reuse) the named images and import them into the real node; returns name -> input-keyed ref."""
    argv = [sys.executable, "-m", "e2e.images", "load", "--ctr-address", containerd_socket(), "--only", *names]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        pytest.fail(f"building or loading images {names} failed:\n{done.stderr[-4000:]}")
    refs = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    missing = [n for n in names if n not in refs]
    assert not missing, f"e2e.images printed no reference for {missing}: {done.stdout}"
    return refs
