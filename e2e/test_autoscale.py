"""The operator scales a pool from live vLLM metrics, up under load and back down after the window.

Engine pods are fake (no GPU), so each Ready pod gets a simulated engine (e2e/vllm_sim.py) serving vLLM-format
/metrics at the pod's own IP; the operator scrapes it exactly as it would scrape vLLM.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import condition, free_port, status_of
from e2e.prerequisites import unavailable
from e2e.prometheus import Prometheus
from e2e.vllm_sim import PoolLoad, SimEngine

pytestmark = pytest.mark.e2e

DEPLOYMENT = {
    "apiVersion": "disagg.dev/v1alpha1",
    "kind": "DisaggDeployment",
    "metadata": {"name": "scaled"},
    "spec": {
        "model": {"name": "Qwen/Qwen3-8B"},
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}},
        "scaling": {
            "interval": "3s",
            "slo": {"ttftP90": "2s", "itlP90": "50ms"},
            "scaleDown": {"stabilizationWindow": "15s"},
        },
    },
}


PROMETHEUS_PORT = free_port()
"""The test Prometheus's port, known before the module's operator starts: the operator queries only a Prometheus
its install allows (D76)."""


@pytest.fixture(scope="module")
def operator_args() -> tuple[str, ...]:
    return (f"--prometheus-url=http://127.0.0.1:{PROMETHEUS_PORT}",)


class FakeEngines:
    """Gives every Ready engine pod of a DisaggDeployment a simulated vLLM at its IP, and drops gone ones."""

    def __init__(self, kube: KubeCluster, namespace: str, name: str, prometheus: Prometheus | None = None) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.prometheus = prometheus
        self.loads = {"prefill": PoolLoad(prompt_tokens_per_s=2000), "decode": PoolLoad(concurrency=10)}
        self.engines: dict[str, SimEngine] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeEngines:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for engine in self.engines.values():
            engine.stop()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            proc = self.kube.run(
                "get", "pods", "-n", self.namespace, "-l", f"disagg.dev/deployment={self.name}", "-o", "json"
            )
            if proc.returncode != 0:
                continue
            pods = json.loads(proc.stdout)["items"]
            alive: dict[str, tuple[str, str]] = {}
            for pod in pods:
                role = pod["metadata"]["labels"].get("disagg.dev/role")
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
                )
                ip = pod.get("status", {}).get("podIP")
                if role in self.loads and ready and ip and not pod["metadata"].get("deletionTimestamp"):
                    alive[pod["metadata"]["name"]] = (role, ip)
            for pod_name in [p for p in self.engines if p not in alive]:
                self.engines.pop(pod_name).stop()
            for pod_name, (role, ip) in alive.items():
                if pod_name not in self.engines:
                    engine = SimEngine(role, ip, 8000, self.loads[role])
                    engine.start()
                    self.engines[pod_name] = engine
            for role, load in self.loads.items():
                load.engines = sum(1 for r, _ in alive.values() if r == role)
            if self.prometheus is not None:
                self.prometheus.set_targets(
                    [
                        (f"{ip}:8000", {"namespace": self.namespace, "pod": pod_name})
                        for pod_name, (_, ip) in sorted(alive.items())
                    ]
                )


def _require_local(kube: KubeCluster) -> None:
    if not kube.local:
        unavailable("serving a pod's metrics from the test process needs the local control plane's loopback pod IPs")


@pytest.fixture
def engines(kube_cluster: KubeCluster, namespace: str) -> Iterator[FakeEngines]:
    _require_local(kube_cluster)
    with FakeEngines(kube_cluster, namespace, "scaled") as fake:
        yield fake


@pytest.fixture
def prometheus_engines(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> Iterator[tuple[FakeEngines, Prometheus]]:
    _require_local(kube_cluster)
    prometheus = Prometheus(kube_cluster.bin_dir / "prometheus", tmp_path, port=PROMETHEUS_PORT)
    prometheus.start()
    try:
        with FakeEngines(kube_cluster, namespace, "scaled", prometheus) as fake:
            yield fake, prometheus
    finally:
        prometheus.stop()


def _events(kube: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get("events", "-n", namespace, "--field-selector", "involvedObject.name=scaled")[
        "items"
    ]
    return items


def _decode_desired(kube: KubeCluster, namespace: str, check: Callable[[int], bool]) -> Callable[[], Any]:
    def probe() -> dict[str, Any] | None:
        status = status_of(kube, namespace, "scaled")
        return status if check(int(status.get("decode", {}).get("desiredReplicas", 1))) else None

    return probe


def _scale_up_then_down(kube: KubeCluster, namespace: str, engines: FakeEngines, document: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
    wait_for(
        "the deployment to be Ready", lambda: status_of(kube, namespace, "scaled").get("phase") == "Ready", timeout=90
    )

    engines.loads["decode"].concurrency = 220  # 220 running requests on 64-slot engines: ITL far above 50 ms
    grown = wait_for("decode to scale up", _decode_desired(kube, namespace, lambda n: n >= 3), timeout=150)
    assert grown["decode"]["lastScaleReason"] and grown["decode"]["lastScaleTime"]
    assert condition(grown, "ScalingActive")["status"] == "True"
    deployment = kube.get("deployment", "scaled-decode", "-n", namespace, "--show-managed-fields")
    assert deployment["spec"]["replicas"] == grown["decode"]["desiredReplicas"]
    managers = {
        entry["manager"]
        for entry in deployment["metadata"]["managedFields"]
        if "f:replicas" in entry.get("fieldsV1", {}).get("f:spec", {})
    }
    assert managers == {"disagg-operator-replicas"}  # the spec's apply no longer owns the count
    assert status_of(kube, namespace, "scaled")["prefill"]["desiredReplicas"] == 1  # prefill untouched
    wait_for("the ScaledUp event", lambda: any(e["reason"] == "ScaledUp" for e in _events(kube, namespace)))

    engines.loads["decode"].concurrency = 2  # a trickle: one replica is plenty
    shrunk = wait_for("decode to scale back down", _decode_desired(kube, namespace, lambda n: n == 1), timeout=240)
    assert "scale down" in shrunk["decode"]["lastScaleReason"]
    wait_for("the ScaledDown event", lambda: any(e["reason"] == "ScaledDown" for e in _events(kube, namespace)))
    wait_for(
        "decode pods to follow",
        lambda: kube.get("deployment", "scaled-decode", "-n", namespace)["status"].get("readyReplicas") == 1,
        timeout=60,
    )


def test_decode_scales_up_under_load_and_back_down_after_the_window(
    kube_cluster: KubeCluster, namespace: str, engines: FakeEngines
) -> None:
    """Metrics scraped straight from every engine pod's /metrics (the default source)."""
    _scale_up_then_down(kube_cluster, namespace, engines, copy.deepcopy(DEPLOYMENT))


def test_the_prometheus_source_drives_the_same_scaling(
    kube_cluster: KubeCluster, namespace: str, prometheus_engines: tuple[FakeEngines, Prometheus]
) -> None:
    """Metrics read with PromQL from a real Prometheus that scrapes the engines."""
    engines, prometheus = prometheus_engines
    document = copy.deepcopy(DEPLOYMENT)
    # Prometheus scrapes every second here, so a 5 s window holds enough samples.
    document["spec"]["scaling"]["metrics"] = {
        "source": "prometheus",
        "prometheus": {"url": prometheus.url, "window": "5s"},
    }
    _scale_up_then_down(kube_cluster, namespace, engines, document)
