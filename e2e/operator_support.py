"""Run the operator under test as a real process (`disagg run`), as a given identity, and talk to it."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kr8s.objects import APIObject, CustomResourceDefinition, new_class

from disagg.names import API_VERSION, CHILD_KINDS, GROUP, KIND, LABEL_DEPLOYMENT, PLURAL
from e2e.localcluster.testing import KubeCluster, wait_for

REPO = Path(__file__).resolve().parent.parent
CRD_FILE = REPO / "crds" / "disagg.dev_disaggdeployments.yaml"
RBAC_DIR = Path(__file__).resolve().parent / "rbac"
DisaggDeploymentObject: type[APIObject] = new_class(KIND, version=API_VERSION, asyncio=False, plural=PLURAL)
"""The kr8s class of our resource, from the same names the operator uses (no API discovery)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def token_kubeconfig(kube: KubeCluster, token: str, path: Path) -> Path:
    """The admin kubeconfig's cluster and CA, authenticated only by a ServiceAccount token."""
    view = json.loads(kube.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    cluster = view["clusters"][0]["cluster"]
    if "certificate-authority" in cluster:
        ca = Path(cluster["certificate-authority"]).read_bytes()
        cluster = {"server": cluster["server"], "certificate-authority-data": base64.b64encode(ca).decode()}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def install_crd(kube: KubeCluster) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    crd = CustomResourceDefinition.get(f"{PLURAL}.{GROUP}", api=kube.api)

    def established() -> bool:
        # Not kr8s's wait: it raises on an object without status.conditions, as a CRD is for its first moments.
        crd.refresh()
        conditions = (crd.raw.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    wait_for("the DisaggDeployment CRD to be established", established, timeout=60)


class OperatorProcess:
    """`disagg run` in a subprocess with its own kubeconfig, metrics and liveness ports, and a log file.

    `serving_check`: the operator's default mode of the serving check. kwok's pods run nothing, so the fake-node
    suite runs the operator with it Off (Serving is Unknown with reason CheckDisabled and Ready means the pods are
    ready, as documented for Off); the serving tests set the mode in their specs (D108)."""

    def __init__(self, kubeconfig: Path, log_path: Path, *extra_args: str, serving_check: str = "Off") -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_args = [*extra_args, "--serving-check", serving_check]
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "disagg.cli",
                "run",
                "--metrics-port",
                str(self.metrics_port),
                "--liveness-port",
                str(self.liveness_port),
                "--resync-seconds",
                "30",
                *self.extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("the operator's liveness endpoint", self.alive, timeout=60)

    def alive(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"operator exited; log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything, like a node failure or an OOM kill."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.kill()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        metric, _, label_text = series.partition("{")
        if metric == name and ",".join(sorted(label_text.rstrip("}").split(","))) == wanted:
            return float(value)
    return 0.0


def disagg_deployment(kube: KubeCluster, namespace: str, name: str) -> APIObject:
    return DisaggDeploymentObject.get(name, namespace=namespace, api=kube.api)


def status_of(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = disagg_deployment(kube, namespace, name).raw.get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def wait_phase(kube: KubeCluster, namespace: str, name: str, phase: str, timeout: float = 90) -> dict[str, Any]:
    """Until the operator reports `phase`: a poll for its first status, then kr8s' watch-based wait. (kr8s 0.20's
    wait() cannot start on an object without status: it reads status.conditions or one jsonpath match and raises
    when there is none.)"""
    deadline = time.monotonic() + timeout
    try:
        wait_for(f"{namespace}/{name} to get a status", lambda: status_of(kube, namespace, name) or None, timeout)
        # kr8s 0.20's wait() also returns when its watch ends without the condition (the CRD was re-applied on a
        # shared cluster: "storage is (re)initializing"), so the phase is read again and the wait resumed.
        while status_of(kube, namespace, name).get("phase") != phase:
            if time.monotonic() > deadline:
                raise TimeoutError
            resource = disagg_deployment(kube, namespace, name)
            resource.wait(f"jsonpath='{{.status.phase}}'={phase}", timeout=max(deadline - time.monotonic(), 1))
    except TimeoutError:
        last = json.dumps(status_of(kube, namespace, name), indent=1)
        raise TimeoutError(
            f"timed out after {timeout:.0f}s waiting for {namespace}/{name} to be {phase}; last status: {last}"
        ) from None
    return status_of(kube, namespace, name)


def children(kube: KubeCluster, namespace: str, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of a child kind carrying our label for this DisaggDeployment, by (kind, name). Kinds the
    cluster does not serve (LeaderWorkerSet with DISAGG_E2E_LWS=0) have no objects."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    served = {(resource["version"], resource["name"]) for resource in kube.api.api_resources()}
    for kind in CHILD_KINDS:
        if (kind.api_version, kind.plural) not in served:
            continue
        for obj in kube.api.get(kind.resource, namespace=namespace, label_selector={LABEL_DEPLOYMENT: name}):
            found[(kind.name, obj.name)] = {**obj.raw, "kind": kind.name, "apiVersion": kind.api_version}
    return found


def wait_seconds(seconds: float) -> None:
    time.sleep(seconds)


def with_test_images(document: dict[str, Any]) -> dict[str, Any]:
    """The DisaggDeployment with the images a container-running cluster (kind) can start without GPUs.

    On the local control plane pods are never started, so the examples are applied as written. e2e/kind/up.sh
    builds and loads a vLLM simulator, vllm-router and the operator (whose image runs the P/D frontend), and
    names them in these variables.
    """
    engine = os.environ.get("DISAGG_E2E_ENGINE_IMAGE")
    implementation = (document.get("spec", {}).get("frontend", {}).get("router") or {}).get("implementation")
    variable = "DISAGG_E2E_ROUTER_IMAGE" if implementation == "vllm-router" else "DISAGG_E2E_OPERATOR_IMAGE"
    router = os.environ.get(variable)
    if not engine and not router:
        return document
    spec = document.setdefault("spec", {})
    if engine:
        spec.setdefault("engine", {})["image"] = engine
        store = spec.get("kvCache", {}).get("store")
        if store and store.get("type") == "mooncake":
            store.setdefault("mooncake", {})["masterImage"] = engine
        if store and store.get("type") == "lmcache":
            store.setdefault("lmcache", {})["serverImage"] = engine
    if router:
        spec.setdefault("frontend", {}).setdefault("router", {})["image"] = router
    return document
