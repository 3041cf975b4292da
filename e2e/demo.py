"""The one-command demo: a cluster, the CRD, the operator, a DisaggDeployment becoming Ready on fake GPUs.

    python -m e2e.demo up      # make demo
    python -m e2e.demo down    # make demo-down

With DISAGG_DEMO_REAL_ENGINES=1 (`make demo REAL_ENGINES=1`) it serves for real instead: on the local cluster's
real node, the operator installed with Helm from its image built here runs e2e/specs/tiny-nixl-pull.yaml, real
vLLM CPU engines behind vllm-router, and the demo prints the curl command that sends a request to its endpoint.

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

from e2e.localcluster import cluster, network
from e2e.localcluster.config import BinDir, default_state_dir, real_node_wanted
from e2e.localcluster.testing import KubeCluster
from e2e.operator_support import REPO, install_crd, with_test_images
from e2e.realnode_support import HelmRelease, build_and_load, ensure_namespace, real_pull_document

NAMESPACE = "disagg-demo"
EXAMPLE = REPO / "examples" / "01-minimal.yaml"
NAME = "qwen3-32b"


def real_engines() -> bool:
    return os.environ.get("DISAGG_DEMO_REAL_ENGINES", "0") not in ("", "0")


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
    if real_engines():
        choice = "local"  # the real node is part of the local cluster
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
        os.environ.setdefault("DISAGG_E2E_OPERATOR_IMAGE", "ghcr.io/disagg-dev/disagg-operator:e2e")
        return KubeCluster(Path(kubeconfig), _kubectl_on_path(), local=False)
    bins = BinDir.default()
    if not bins.is_complete():
        say("building the local control plane from upstream sources (first time only; 15-25 minutes on 2 cores)")
    cluster.ensure_binaries(bins, say)
    # The fake-GPU demo needs no real node; it gets one where the machine allows (root, containerd, runc).
    with_real_node = real_engines() or (real_node_wanted() and not network.prerequisites())
    state = cluster.up(state_dir(), bins, say, with_real_node=with_real_node)
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
    # Fake nodes run no engine and the operator runs outside the cluster, so there is nothing a serving check could
    # reach: the demo says so (Serving Unknown, CheckDisabled) instead of reporting a failure (D108).
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "disagg",
            "run",
            "--metrics-port",
            "0",
            "--liveness-port",
            "0",
            "--serving-check",
            "Off",
        ],
        env={**os.environ, "KUBECONFIG": str(kube.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pid_file.write_text(str(process.pid))
    say(f"operator running as pid {process.pid}; log: {state_dir() / 'demo-operator.log'}")


def watch_until_ready(kube: KubeCluster, name: str = NAME, timeout: float = 300) -> bool:
    say(f"kubectl get dd -n {NAMESPACE} -w   (until Ready)")
    print("NAME        PREFILL   DECODE   PHASE         ENDPOINT", flush=True)
    last = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = kube.run("get", "dd", name, "-n", NAMESPACE, "-o", "json")
        status = json.loads(proc.stdout).get("status", {}) if proc.returncode == 0 else {}
        row = (
            status.get("prefillReady", ""),
            status.get("decodeReady", ""),
            status.get("phase", ""),
            status.get("endpoint", ""),
        )
        if row != last:
            print(f"{name:<11} {row[0]:<9} {row[1]:<8} {row[2]:<13} {row[3]}", flush=True)
            last = row
        if row[2] == "Ready":
            return True
        time.sleep(0.5)
    return False


def _release() -> HelmRelease:
    return HelmRelease("disagg-operator", "disagg-system", state_dir() / "helm-home")


def up_real_engines(kube: KubeCluster) -> None:
    say("building the operator, router and vLLM CPU images and loading them into the real node (cold: ~15 min)")
    images = build_and_load("operator", "router", "vllm-cpu")
    install_crd(kube)
    ensure_namespace(kube, NAMESPACE)
    release = _release()
    if kube.run(
        "get", "deployment", "-n", release.namespace, "-l", "app.kubernetes.io/instance=disagg-operator"
    ).stdout:
        say("the operator's Helm release is already installed")
    else:
        say(f"helm install {release.name} charts/disagg-operator -n {release.namespace} (image {images['operator']})")
        release.install(kube, images["operator"], [NAMESPACE])
    document = real_pull_document(images)
    name = document["metadata"]["name"]
    say("applying e2e/specs/tiny-nixl-pull.yaml (one prefill and one decode vLLM CPU engine, NIXL pull)")
    kube.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(document))
    if not watch_until_ready(kube, name, timeout=900):
        say("not Ready in time; `kubectl describe dd` says why:")
        print(kube.run("describe", "dd", name, "-n", NAMESPACE).stdout)
        sys.exit(1)
    ip = kube.get("service", name, "-n", NAMESPACE)["spec"]["clusterIP"]
    say("serving. Send a request to the DisaggDeployment's Service (kube-proxy routes it from this machine):")
    print(
        f"  curl -s http://{ip}:8000/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        f'    -d \'{{"model": "tiny", "messages": [{{"role": "user", "content": "Hello"}}], '
        f'"max_tokens": 16}}\'\n'
        f"  export KUBECONFIG={kube.kubeconfig} PATH={kube.bin_dir}:$PATH\n"
        f"  kubectl get dd,pods -n {NAMESPACE} -o wide; kubectl logs -n {NAMESPACE} deploy/{name}-router\n"
        "(the model is a tiny one with random weights: the text is noise, the path is real)\n"
        "Tear everything down with:  make demo-down",
        flush=True,
    )


def up() -> None:
    kube = cluster_for_demo()
    if real_engines():
        up_real_engines(kube)
        return
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
    if (state_dir() / "helm-home").exists():
        kube_config = cluster.Layout(state_dir()).kubeconfig
        if kube_config.exists():
            kube = KubeCluster(kube_config, BinDir.default().path, local=True)
            kube.run("delete", "namespace", NAMESPACE, "--timeout=120s")
            try:
                _release().uninstall(kube)
                say("the operator's Helm release is uninstalled")
            except RuntimeError as err:
                say(f"helm uninstall: {err}")
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
