"""What tests on the real node need: the node itself, the images built here and loaded into its containerd.

Pods meant for the real node tolerate its taint and select it (`placement`); every other pod in the suite keeps
landing on kwok's nodes. Missing prerequisites (no real node, images that do not build) fail in CI and skip with
the reason elsewhere, so the tier never passes by not running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import realnode
from e2e.localcluster.components import Layout
from e2e.localcluster.config import REPO_ROOT, BinDir, default_state_dir
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.prerequisites import unavailable

CHART = REPO_ROOT / "charts" / "disagg-operator"
# NIXL pull with real vLLM CPU engines: the DisaggDeployment of the real-engine tier and of `make demo REAL_ENGINES=1`.
REAL_PULL_SPEC = REPO_ROOT / "e2e" / "specs" / "tiny-nixl-pull.yaml"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}

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


ENGINES_LOCK = realnode.OWNER_FILE.parent / "real-engines.lock"


@contextlib.contextmanager
def engines_turn() -> Iterator[None]:
    """Hold the machine's real-engine slot: vLLM CPU engines need a core each, so only one test module (of any
    worktree or session on this machine) runs them at a time; the others wait here."""
    ENGINES_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with ENGINES_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def placement() -> dict[str, Any]:
    """Pod spec fields that put a pod on the real node."""
    return {"nodeSelector": dict(NODE_SELECTOR), "tolerations": [dict(TOLERATION)]}


def containerd_socket() -> str:
    return str(realnode.NodePaths(Layout(default_state_dir().resolve())).socket)


class ImagesError(RuntimeError):
    pass


@cache
def build_and_load(*names: str) -> dict[str, str]:
    """Build (or reuse) the named images and import them into the real node; returns name -> input-keyed ref."""
    argv = [sys.executable, "-m", "e2e.images", "load", "--ctr-address", containerd_socket(), "--only", *names]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise ImagesError(f"building or loading images {names} failed:\n{done.stderr[-4000:]}")
    refs = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    missing = [n for n in names if n not in refs]
    if missing:
        raise ImagesError(f"e2e.images printed no reference for {missing}: {done.stdout}")
    return refs


def load_images(*names: str) -> dict[str, str]:
    """`build_and_load` for tests: a build failure fails the test (never a skip)."""
    try:
        return build_and_load(*names)
    except ImagesError as err:
        pytest.fail(str(err))


def real_pull_document(images: dict[str, str]) -> dict[str, Any]:
    """The real-engine NIXL pull DisaggDeployment behind vllm-router, naming the images as they were built here."""
    return real_document(REAL_PULL_SPEC, images)


def real_document(spec: Path, images: dict[str, str]) -> dict[str, Any]:
    """A real-engine DisaggDeployment (e2e/specs/tiny-*.yaml) naming the images as they were built here: the
    engine image, and vllm-router's when the spec asks for it. The operator's frontend needs nothing: the operator
    runs it from its own image (the Helm chart passes that image, input-keyed, as --frontend-image)."""
    document: dict[str, Any] = yaml.safe_load(spec.read_text())
    document["spec"]["engine"]["image"] = images["vllm-cpu"]
    router = document["spec"]["frontend"]["router"]
    if router.get("implementation") == "vllm-router":
        router["image"] = images["router"]
    return document


@dataclass(frozen=True)
class Served:
    """A DisaggDeployment serving on the real node, with its endpoint (the user-facing Service's cluster IP)."""

    namespace: str
    name: str
    endpoint: str


@contextlib.contextmanager
def serving(kube: KubeCluster, namespace: str, document: dict[str, Any], timeout: float) -> Iterator[Served]:
    """Apply a DisaggDeployment into a fresh namespace, wait until Ready, yield its endpoint; afterwards print
    every pod's log tail and delete the namespace (its engines with it)."""
    from e2e.operator_support import wait_phase

    ensure_namespace(kube, namespace)
    name = document["metadata"]["name"]
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
    try:
        wait_phase(kube, namespace, name, "Ready", timeout=timeout)
        service = kube.get("service", name, "-n", namespace)
        yield Served(namespace, name, f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}")
    finally:
        for pod in kube.get("pods", "-n", namespace)["items"]:
            pod_name = pod["metadata"]["name"]
            print(f"--- logs of {pod_name}:\n{kube.run('logs', '-n', namespace, pod_name, '--tail=40').stdout}")
        # What the operator decided (remediation, rollouts, readiness) explains most failures here.
        events = kube.run("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout
        print(f"--- events in {namespace}:\n{events}")
        print(f"--- status of {name}:\n{json.dumps(kube.get('dd', name, '-n', namespace).get('status'), indent=1)}")
        kube.run("delete", "namespace", namespace, "--wait=true", "--timeout=180s")


def pods_of(kube: KubeCluster, served: Served, role: str) -> list[dict[str, Any]]:
    selector = f"disagg.dev/deployment={served.name},disagg.dev/role={role}"
    items: list[dict[str, Any]] = kube.get("pods", "-n", served.namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def metrics_of(url: str) -> dict[str, float]:
    """A Prometheus page summed per metric name, with the `source` label kept (vllm:prompt_tokens_by_source)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            for label in ("source", "outcome"):
                if label in sample.labels:
                    key = f"{sample.name}{{{label}={sample.labels[label]}}}"
            totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def engine_metrics(kube: KubeCluster, served: Served, role: str) -> dict[str, float]:
    """Counters of the one engine of `role`, read from its pod's own /metrics."""
    (pod,) = pods_of(kube, served, role)
    return metrics_of(f"http://{pod['status']['podIP']}:8000/metrics")


def post_json(url: str, body: dict[str, Any], timeout: float = 180.0) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        return dict(response.headers), bytes(response.read())


def stream_chunks(raw: bytes) -> list[dict[str, Any]]:
    lines = [line.removeprefix("data: ") for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", f"no [DONE] at the end of the stream: {lines[-3:]}"
    return [json.loads(line) for line in lines[:-1]]


PROMPT_LOCAL = "vllm:prompt_tokens_by_source_total{source=local_compute}"
PROMPT_NIXL = "vllm:prompt_tokens_by_source_total{source=external_kv_transfer}"
PROMPT_CACHED = "vllm:prompt_tokens_by_source_total{source=local_cache_hit}"
GENERATED = "vllm:generation_tokens_total"


def ensure_namespace(kube: KubeCluster, name: str, labels: dict[str, str] | None = None) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    wait_for(f"serviceaccount default in {name}", lambda: kube.run("get", "sa/default", "-n", name).returncode == 0)


@dataclass(frozen=True)
class HelmRelease:
    """The operator installed with the chart, from its image built here, on the real node."""

    name: str
    namespace: str
    home: Path

    def helm(self, kube: KubeCluster, *args: str) -> str:
        env = {**os.environ, **{f"HELM_{k}_HOME": str(self.home / k.lower()) for k in ("CONFIG", "CACHE", "DATA")}}
        done = subprocess.run(
            [str(BinDir.default().binary("helm")), *args, f"--kubeconfig={kube.kubeconfig}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def install(self, kube: KubeCluster, operator_image: str, watch: list[str], *extra: str) -> None:
        """`helm install --wait` into a namespace enforcing the restricted Pod Security level."""
        ensure_namespace(kube, self.namespace, RESTRICTED)
        repository, _, tag = operator_image.rpartition(":")
        where = placement()
        self.helm(
            kube,
            "install", self.name, str(CHART), "--namespace", self.namespace,
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
            "--set-json", f"watchNamespaces={json.dumps(watch)}",
            "--set-json", f"nodeSelector={json.dumps(where['nodeSelector'])}",
            "--set-json", f"tolerations={json.dumps(where['tolerations'])}",
            *extra,
            "--wait", "--timeout", "5m",
        )  # fmt: skip

    def uninstall(self, kube: KubeCluster) -> None:
        self.helm(kube, "uninstall", self.name, "--namespace", self.namespace, "--wait")
        kube.run("delete", "namespace", self.namespace, "--wait=false")
