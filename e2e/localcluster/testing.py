"""Helpers for tests that drive any cluster through its kubeconfig.

Tests talk to the cluster with the real kubectl (apply, explain, scale: what a
user types) and with kr8s (queries and waits, in-process), so they run
unchanged against the local control plane, kind or any other cluster a
kubeconfig points at.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kr8s

T = TypeVar("T")


class KubectlError(RuntimeError):
    def __init__(self, args: list[str], proc: subprocess.CompletedProcess[str]) -> None:
        super().__init__(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        self.stderr = proc.stderr


@dataclass(frozen=True)
class KubeCluster:
    """The cluster under test.

    kubeconfig: admin kubeconfig. bin_dir: directory holding kubectl and helm.
    local: True for the local control plane (known fake-node layout),
    False for a cluster supplied through DISAGG_E2E_KUBECONFIG.
    """

    kubeconfig: Path
    bin_dir: Path
    local: bool

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm_path(self) -> Path:
        return self.bin_dir / "helm"

    def run(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; never raises on a non-zero exit."""
        cmd = [str(self.kubectl_path), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120, check=False)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        proc = self.run(*args, stdin=stdin)
        if proc.returncode != 0:
            raise KubectlError(list(args), proc)
        return proc.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps(obj))

    @property
    def api(self) -> kr8s.Api:
        """kr8s on the same kubeconfig, for queries and waits without a kubectl process each (kr8s keeps one
        client per kubeconfig and thread)."""
        return kr8s.api(kubeconfig=str(self.kubeconfig))


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, every: float = 0.5) -> T:
    """Poll `probe` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
