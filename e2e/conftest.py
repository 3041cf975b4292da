"""Session fixtures for end-to-end tests against a real Kubernetes API server.

Which cluster:
* DISAGG_E2E_KUBECONFIG set -> that cluster (kind, or anything else) is used
  as is and never started or stopped here.
* otherwise the local control plane (e2e/localcluster) is used; it is started
  for the session unless one is already running, and stopped at the end only
  if this session started it. It includes the LeaderWorkerSet controller
  unless DISAGG_E2E_LWS=0.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.localcluster import cluster
from e2e.localcluster.config import BUILD_SCRIPT, REPO_ROOT, BinDir, default_state_dir
from e2e.localcluster.testing import KubeCluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a Kubernetes API server")


def _say(msg: str) -> None:
    # Bring-up can take a while; show progress even while output is captured.
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"[kube_cluster] {msg}\n")
        stream.flush()


def _external(kubeconfig: str) -> KubeCluster:
    bins = BinDir.default()
    if bins.is_complete():
        tool_dir = bins.path
    else:
        found = shutil.which("kubectl")
        if found is None:
            pytest.fail("DISAGG_E2E_KUBECONFIG is set but no kubectl: build the cache or put kubectl on PATH")
        tool_dir = Path(found).parent
    return KubeCluster(Path(kubeconfig).resolve(), tool_dir, local=False)


def _require_binaries(bins: BinDir) -> None:
    if bins.is_complete():
        return
    if not os.environ.get("CI"):
        pytest.skip(
            f"control-plane binaries not built in {bins.path}; run `make cluster-build` "
            f"(or {BUILD_SCRIPT.relative_to(REPO_ROOT)}; 15-25 min cold on 2 cores, cached afterwards), "
            "or set DISAGG_E2E_KUBECONFIG to use an existing cluster"
        )
    cluster.ensure_binaries(bins, _say)  # in CI a fresh machine builds from scratch


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    patch = pytest.MonkeyPatch()
    external = os.environ.get("DISAGG_E2E_KUBECONFIG")
    if external:
        kube = _external(external)
        patch.setenv("KUBECONFIG", str(kube.kubeconfig))
        yield kube
        patch.undo()
        return

    bins = BinDir.default()
    _require_binaries(bins)
    root = default_state_dir().resolve()
    existing = cluster.State.load(root)
    started_here = existing is None or not cluster.healthy(existing)
    # DISAGG_E2E_LWS=0 starts the cluster without the LeaderWorkerSet API.
    state = cluster.up(root, bins, _say, with_lws=os.environ.get("DISAGG_E2E_LWS", "1") != "0")
    kube = KubeCluster(state.layout.kubeconfig, bins.path, local=True)
    patch.setenv("KUBECONFIG", str(kube.kubeconfig))
    patch.setenv("PATH", f"{bins.path}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        yield kube
    finally:
        patch.undo()
        if started_here:
            cluster.down(root, bins, _say)
