"""The one-command demo: a cluster, the CRD, the operator, a DisaggDeployment becoming Ready on fake GPUs.

    python -m e2e.demo up      # make demo
    python -m e2e.demo down    # make demo-down

Cluster choice (DISAGG_DEMO_CLUSTER): `current` uses your current kube context as is; `local` (the default when
there is no Docker engine) starts the local control plane from e2e/localcluster, building it on first use. With a
Docker engine and kind installed, `auto` creates a kind cluster with e2e/kind/up.sh.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from e2e.localcluster import cluster
from e2e.localcluster.config import BinDir, default_state_dir
from e2e.localcluster.testing import KubeCluster
from e2e.operator_support import REPO, install_crd, with_test_images

NAMESPACE = "disagg-demo"
EXAMPLE = REPO / "examples" / "01-minimal.yaml"
NAME = "qwen3-32b"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def state_dir() -> Path:
    return default_state_dir().resolve()


def _docker_usable() -> bool:
    if not shutil.which("kind") or not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0


def _kubectl_on_path() -> Path:
    found = shutil.which("kubectl")
    if not found:
        sys.exit("kubectl is not on PATH")
    return Path(found).parent


def cluster_for_demo() -> KubeCluster:
    choice = os.environ.get("DISAGG_DEMO_CLUSTER", "auto")
    if choice == "current":
        kubeconfig = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
        say(f"using the current kube context ({kubeconfig})")
        return KubeCluster(Path(kubeconfig), _kubectl_on_path(), local=False)
    if choice == "kind" or (choice == "auto" and _docker_usable()):
        say("creating a kind cluster (e2e/kind/up.sh; engines run the vLLM simulator: kind has no GPUs)")
        output = subprocess.run([str(REPO / "e2e" / "kind" / "up.sh")], check=True, stdout=subprocess.PIPE, text=True)
        kubeconfig = output.stdout.strip().splitlines()[-1]
        os.environ.setdefault("DISAGG_E2E_ENGINE_IMAGE", "disagg-vllm-sim:e2e")
        os.environ.setdefault("DISAGG_E2E_ROUTER_IMAGE", "ghcr.io/disagg-dev/vllm-router:e2e")
        return KubeCluster(Path(kubeconfig), _kubectl_on_path(), local=False)
    bins = BinDir.default()
    if not bins.is_complete():
        say("building the local control plane from upstream sources (first time only; 15-25 minutes on 2 cores)")
    cluster.ensure_binaries(bins, say)
    state = cluster.up(state_dir(), bins, say)
    return KubeCluster(state.layout.kubeconfig, bins.path, local=True)


def start_operator(kube: KubeCluster) -> None:
    pid_file = state_dir() / "demo-operator.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), 0)
            say("the operator is already running")
            return
        except (OSError, ValueError):
            pid_file.unlink()
    log = (state_dir() / "demo-operator.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "disagg", "run", "--metrics-port", "0", "--liveness-port", "0"],
        env={**os.environ, "KUBECONFIG": str(kube.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pid_file.write_text(str(process.pid))
    say(f"operator running as pid {process.pid}; log: {state_dir() / 'demo-operator.log'}")


def watch_until_ready(kube: KubeCluster, timeout: float = 300) -> bool:
    say(f"kubectl get dd -n {NAMESPACE} -w   (until Ready)")
    print("NAME        PREFILL   DECODE   PHASE         ENDPOINT", flush=True)
    last = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = kube.run("get", "dd", NAME, "-n", NAMESPACE, "-o", "json")
        status = json.loads(proc.stdout).get("status", {}) if proc.returncode == 0 else {}
        row = (
            status.get("prefillReady", ""),
            status.get("decodeReady", ""),
            status.get("phase", ""),
            status.get("endpoint", ""),
        )
        if row != last:
            print(f"{NAME:<11} {row[0]:<9} {row[1]:<8} {row[2]:<13} {row[3]}", flush=True)
            last = row
        if row[2] == "Ready":
            return True
        time.sleep(0.5)
    return False


def up() -> None:
    kube = cluster_for_demo()
    install_crd(kube)
    say("CustomResourceDefinition disaggdeployments.disagg.dev installed")
    start_operator(kube)
    kube.run("create", "namespace", NAMESPACE)
    say(f"applying {EXAMPLE.relative_to(REPO)}:")
    print(EXAMPLE.read_text(), flush=True)
    kube.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(with_test_images(yaml.safe_load(EXAMPLE.read_text())))
    )
    if not watch_until_ready(kube):
        say("not Ready in time; `kubectl describe dd` says why:")
        print(kube.run("describe", "dd", NAME, "-n", NAMESPACE).stdout)
        sys.exit(1)
    print(kube.kubectl("get", "deployments,services,pods", "-n", NAMESPACE, "-o", "wide"), flush=True)
    print(kube.kubectl("describe", "dd", NAME, "-n", NAMESPACE).split("Events:")[-1], flush=True)
    say("the API server itself refuses a broken spec (prefill TP 4 with decode TP 6):")
    bad = EXAMPLE.read_text().replace("tensorParallel: 8", "tensorParallel: 6")
    print(kube.run("apply", "-n", NAMESPACE, "-f", "-", stdin=bad).stderr, flush=True)
    say("done. Explore with:")
    print(
        f"  export KUBECONFIG={kube.kubeconfig}\n  export PATH={kube.bin_dir}:$PATH\n"
        f"  kubectl get dd -A; kubectl describe dd {NAME} -n {NAMESPACE}\n"
        f"  .venv/bin/disagg plan -f {EXAMPLE.relative_to(REPO)}\n"
        "Tear everything down with:  make demo-down",
        flush=True,
    )


def down() -> None:
    pid_file = state_dir() / "demo-operator.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text())
            os.killpg(pid, signal.SIGTERM)
            for _ in range(60):  # kopf closes its watches gracefully; give it time before insisting
                time.sleep(0.5)
                os.kill(pid, 0)
            os.killpg(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        say("operator stopped")
        pid_file.unlink()
    if os.environ.get("DISAGG_DEMO_CLUSTER", "auto") in ("auto", "local") and not _docker_usable():
        cluster.down(state_dir(), BinDir.default(), say)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    {"up": up, "down": down}[command]()
