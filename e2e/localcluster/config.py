"""Where things live: pinned versions, the binary cache and the state directory."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE_DIR = REPO_ROOT / "e2e" / "controlplane"
VERSIONS_FILE = CONTROLPLANE_DIR / "versions.env"
BUILD_SCRIPT = CONTROLPLANE_DIR / "build.sh"
NODES_FILE = CONTROLPLANE_DIR / "nodes.yaml"

# The binaries build.sh produces; all must exist for the cluster to start.
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "helm",
    "lws-controller",
    "prometheus",
    "kubelet",
    "kube-proxy",
    "coredns",
    "crictl",
    "pause",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
    "cni/portmap",
)
KWOK_STAGES = "kwok-stages.yaml"


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse the KEY=VALUE lines that build.sh sources."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip()
    return versions


def versions_stamp(path: Path = VERSIONS_FILE) -> str:
    """The exact text build.sh writes into bin/.complete for these versions."""
    lines = [ln for ln in path.read_text().splitlines() if re.match(r"[A-Z0-9_]+=", ln)]
    return "\n".join(lines)


def cache_root() -> Path:
    env = os.environ.get("DISAGG_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "disagg-operator"


def real_node_wanted() -> bool:
    """Whether clusters get the real worker node (on unless DISAGG_E2E_REAL_NODE=0)."""
    return os.environ.get("DISAGG_E2E_REAL_NODE", "1") != "0"


def default_state_dir() -> Path:
    env = os.environ.get("DISAGG_E2E_STATE")
    return Path(env) if env else REPO_ROOT / "e2e" / ".state"


@dataclass(frozen=True)
class BinDir:
    """The versioned cache directory holding the control-plane binaries."""

    path: Path

    @classmethod
    def default(cls) -> BinDir:
        k8s = read_versions()["K8S_VERSION"]
        return cls(cache_root() / f"k8s-{k8s}" / "bin")

    def binary(self, name: str) -> Path:
        return self.path / name

    @property
    def stages(self) -> Path:
        return self.path / KWOK_STAGES

    def is_complete(self) -> bool:
        """True when build.sh finished for exactly the pinned versions."""
        marker = self.path / ".complete"
        if not marker.is_file() or marker.read_text().strip() != versions_stamp().strip():
            return False
        return all(self.binary(b).is_file() for b in BINARIES) and self.stages.is_file()
