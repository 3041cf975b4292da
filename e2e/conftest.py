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
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.localcluster import cluster
from e2e.localcluster.config import BUILD_SCRIPT, REPO_ROOT, BinDir, default_state_dir, real_node_wanted
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import RBAC_DIR, OperatorProcess, install_crd, token_kubeconfig
from e2e.prerequisites import unavailable


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
        unavailable(
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
    state = cluster.up(
        root,
        bins,
        _say,
        with_lws=os.environ.get("DISAGG_E2E_LWS", "1") != "0",
        with_real_node=real_node_wanted(),
    )
    kube = KubeCluster(state.layout.kubeconfig, bins.path, local=True)
    patch.setenv("KUBECONFIG", str(kube.kubeconfig))
    patch.setenv("PATH", f"{bins.path}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        yield kube
    finally:
        patch.undo()
        if started_here:
            cluster.down(root, bins, _say)


@pytest.fixture(scope="module")
def operator_args() -> tuple[str, ...]:
    """Extra `disagg run` arguments for a module's operator (a module overrides this fixture to set them)."""
    return ()


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory, operator_args: tuple[str, ...]
) -> Iterator[OperatorProcess]:
    """The operator, running cluster-wide as its own ServiceAccount with exactly the documented RBAC.

    Module-scoped: a cluster-wide operator left running would also reconcile what other modules (the Helm tests'
    namespace-scoped operator) expect to be left alone.

    Its identity lives in a namespace of its own, removed afterwards with the cluster-scoped RBAC, so tests that
    install the operator another way (Helm, plain manifests) find the cluster as a user would.
    """
    install_crd(kube_cluster)
    home = "disagg-e2e-operator"
    rbac = (
        (RBAC_DIR / "operator-clusterwide.yaml").read_text().replace("namespace: disagg-system", f"namespace: {home}")
    )
    rbac = rbac.replace("name: disagg-operator}", "name: disagg-e2e-operator}")
    # The previous module's operator home may still be terminating; creating into it is refused.
    kube_cluster.run("wait", "--for=delete", f"namespace/{home}", "--timeout=300s")
    kube_cluster.kubectl("create", "namespace", home)
    kube_cluster.kubectl("apply", "-f", "-", stdin=rbac)
    token = kube_cluster.kubectl("create", "token", "disagg-operator", "-n", home, "--duration=6h").strip()
    directory = tmp_path_factory.mktemp("operator")
    process = OperatorProcess(
        token_kubeconfig(kube_cluster, token, directory / "kubeconfig"), directory / "operator.log", *operator_args
    )
    process.start()
    yield process
    process.stop()
    print(f"operator log tail:\n{process.log_tail()}")
    kube_cluster.run("delete", "-f", "-", "--wait=false", stdin=rbac)
    kube_cluster.run("delete", "namespace", home, "--wait=true", "--timeout=300s")


@pytest.fixture
def namespace(kube_cluster: KubeCluster, operator: OperatorProcess) -> Iterator[str]:
    name = f"dd-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    wait_for(
        f"serviceaccount default in {name}", lambda: kube_cluster.run("get", "sa/default", "-n", name).returncode == 0
    )
    yield name
    # Wait, so the next test finds the fake GPUs free again.
    kube_cluster.run("delete", "namespace", name, "--timeout=120s")
