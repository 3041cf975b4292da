"""Served, not only rendered: a DisaggDeployment on the real node answers through its own endpoint.

The operator runs in the cluster as users run it (the Helm chart, its image built here from operator/Dockerfile,
its ServiceAccount, a namespace enforcing the restricted Pod Security level). It deploys e2e/specs/tiny-nixl-pull.yaml:
one prefill and one decode vLLM CPU engine (images/vllm-cpu) and vllm-router, which finds the engines through the
Kubernetes API with the RBAC the operator rendered. Requests go to the DisaggDeployment's Service, and the engines'
own metrics say where every prompt token came from: prefill computed it, decode loaded it over NIXL and computed
none of it. Nothing is patched after rendering.

Engines are heavy (about 3 GB and one core each), so one deployment serves the whole module, in order.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import condition, install_crd, status_of, wait_phase
from e2e.realnode_support import (
    HelmRelease,
    engines_turn,
    ensure_namespace,
    load_images,
    real_pull_document,
    require_real_node,
)

# Building the engine image (cold) and starting two CPU engines take longer than the default 300 s per test.
pytestmark = [pytest.mark.e2e, pytest.mark.real_engines, pytest.mark.timeout(3600)]

READY_TIMEOUT = 900.0  # two vLLM CPU engines starting side by side on two busy cores
PROMPT = "The operator renders prefill and decode engines, and the router sends every request to both of them. " * 3


@dataclass(frozen=True)
class Served:
    namespace: str
    name: str
    endpoint: str
    operator_namespace: str
    images: dict[str, str]


@pytest.fixture(scope="module")
def served(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require_real_node(kube_cluster)
    images = load_images("operator", "router", "vllm-cpu")
    with engines_turn():
        yield from _serve(kube_cluster, images, tmp_path_factory)


def _serve(
    kube_cluster: KubeCluster, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    suffix = uuid.uuid4().hex[:6]
    namespace = f"served-{suffix}"
    release = HelmRelease(f"dd-real-{suffix}", f"disagg-system-{suffix}", tmp_path_factory.mktemp("helm-home"))
    ensure_namespace(kube_cluster, namespace)
    install_crd(kube_cluster)
    release.install(kube_cluster, images["operator"], [namespace], "--set", "operator.resyncSeconds=30")
    document = real_pull_document(images)
    name = document["metadata"]["name"]
    kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
    try:
        wait_phase(kube_cluster, namespace, name, "Ready", timeout=READY_TIMEOUT)
        service = kube_cluster.get("service", name, "-n", namespace)
        endpoint = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
        yield Served(namespace, name, endpoint, release.namespace, images)
    finally:
        for pod in kube_cluster.get("pods", "-n", namespace)["items"]:
            pod_name = pod["metadata"]["name"]
            print(f"--- logs of {pod_name}:\n{kube_cluster.run('logs', '-n', namespace, pod_name, '--tail=40').stdout}")
        kube_cluster.run("delete", "namespace", namespace, "--wait=true", "--timeout=180s")
        release.uninstall(kube_cluster)


# ---- helpers -------------------------------------------------------------------------------------------------


def _pods(kube: KubeCluster, served: Served, role: str) -> list[dict[str, Any]]:
    selector = f"disagg.dev/deployment={served.name},disagg.dev/role={role}"
    items: list[dict[str, Any]] = kube.get("pods", "-n", served.namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _engine_metrics(kube: KubeCluster, served: Served, role: str) -> dict[str, float]:
    """Counters of the one engine of `role`, read from the pod's own /metrics (summed over their label sets)."""
    (pod,) = _pods(kube, served, role)
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8000/metrics", timeout=10) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if "source" in sample.labels:
                key = f"{sample.name}{{source={sample.labels['source']}}}"
            totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def _restarts(kube: KubeCluster, served: Served, role: str) -> int:
    (pod,) = _pods(kube, served, role)
    return sum(int(status["restartCount"]) for status in pod["status"]["containerStatuses"])


REFUSED_PATIENCE = 180.0  # how long a refused connection is retried (see _post)


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> bytes:
    """POST `body`; a refused connection is retried for up to REFUSED_PATIENCE seconds.

    On two saturated cores an engine's /health can miss its readiness probe for a few periods; the router then has
    no worker, is unready itself, and kube-proxy refuses connections to the Service. A refused connection sent
    nothing, so retrying it changes no engine counter; any other failure (a reset, a 5xx, a timeout) fails.
    """
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    deadline = time.monotonic() + REFUSED_PATIENCE
    while True:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                assert response.status == 200
                return bytes(response.read())
        except urllib.error.URLError as error:
            if not isinstance(error.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            print(f"{url}: connection refused (the endpoint has no ready router); retrying")
            time.sleep(2.0)


def _stream_chunks(raw: bytes) -> list[dict[str, Any]]:
    lines = [line.removeprefix("data: ") for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", f"no [DONE] at the end of the stream: {lines[-3:]}"
    return [json.loads(line) for line in lines[:-1]]


PROMPT_LOCAL = "vllm:prompt_tokens_by_source_total{source=local_compute}"
PROMPT_NIXL = "vllm:prompt_tokens_by_source_total{source=external_kv_transfer}"
GENERATED = "vllm:generation_tokens_total"


# ---- tests ---------------------------------------------------------------------------------------------------


def test_the_operator_runs_in_cluster_from_its_own_image(kube_cluster: KubeCluster, served: Served) -> None:
    pods = kube_cluster.get("pods", "-n", served.operator_namespace)["items"]
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # the chart's default: two replicas, one leads (D120)
    for pod in pods:
        assert pod["spec"]["nodeName"] == "real-0"
        assert pod["spec"]["containers"][0]["image"] == served.images["operator"]
        assert all(c["ready"] for c in pod["status"]["containerStatuses"])
        assert pod["spec"]["serviceAccountName"].endswith("disagg-operator")
    namespace = kube_cluster.get("namespace", served.operator_namespace)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    holders = {
        lease["spec"].get("holderIdentity")
        for lease in kube_cluster.get("leases", "-n", served.operator_namespace)["items"]
    }
    (leader,) = [pod["metadata"]["name"] for pod in pods if pod["metadata"]["name"] in holders]
    log = kube_cluster.kubectl("logs", "-n", served.operator_namespace, leader)
    assert served.namespace in log and "Traceback" not in log, log[-3000:]


def test_every_engine_and_router_pod_runs_with_passing_probes(kube_cluster: KubeCluster, served: Served) -> None:
    for role in ("prefill", "decode", "router"):
        (pod,) = _pods(kube_cluster, served, role)
        assert pod["spec"]["nodeName"] == "real-0", role
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, (role, status)
    router = _pods(kube_cluster, served, "router")[0]["metadata"]["name"]
    assert kube_cluster.kubectl("logs", "-n", served.namespace, router).strip(), "kubectl logs shows nothing"


def test_requests_through_the_endpoint_are_prefilled_then_decoded_from_kv_moved_over_nixl(
    kube_cluster: KubeCluster, served: Served
) -> None:
    restarts_before = {role: _restarts(kube_cluster, served, role) for role in ("prefill", "decode")}
    before = {role: _engine_metrics(kube_cluster, served, role) for role in ("prefill", "decode")}
    prompt_tokens = 0
    completion_tokens = 0

    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    answer = json.loads(_post(f"{served.endpoint}/v1/completions", body))
    assert answer["choices"][0]["text"], answer
    prompt_tokens += answer["usage"]["prompt_tokens"]
    completion_tokens += answer["usage"]["completion_tokens"]

    chat = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8, "ignore_eos": True}
    answer = json.loads(_post(f"{served.endpoint}/v1/chat/completions", chat))
    assert answer["choices"][0]["message"]["content"], answer
    prompt_tokens += answer["usage"]["prompt_tokens"]
    completion_tokens += answer["usage"]["completion_tokens"]

    usage_option = {"stream": True, "stream_options": {"include_usage": True}}
    chunks = _stream_chunks(_post(f"{served.endpoint}/v1/completions", {**body, **usage_option}))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]), "the stream carried no text"
    prompt_tokens += chunks[-1]["usage"]["prompt_tokens"]
    completion_tokens += chunks[-1]["usage"]["completion_tokens"]

    chunks = _stream_chunks(_post(f"{served.endpoint}/v1/chat/completions", {**chat, **usage_option}))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text, "the chat stream carried no text"
    prompt_tokens += chunks[-1]["usage"]["prompt_tokens"]
    completion_tokens += chunks[-1]["usage"]["completion_tokens"]

    after = {role: _engine_metrics(kube_cluster, served, role) for role in ("prefill", "decode")}
    # A restarted engine's counters start again at 0, and every delta below would be wrong for a reason they hide.
    restarts_after = {role: _restarts(kube_cluster, served, role) for role in ("prefill", "decode")}
    assert restarts_after == restarts_before, f"an engine restarted while serving: {restarts_before}, {restarts_after}"

    def delta(role: str, key: str) -> float:
        return after[role].get(key, 0.0) - before[role].get(key, 0.0)

    assert prompt_tokens > 4 * 50
    # Prefill computed every prompt and generated exactly one token per request: it ran first, as a prefill.
    assert delta("prefill", PROMPT_LOCAL) == prompt_tokens
    assert delta("prefill", GENERATED) == 4
    # Decode took every prompt token over NIXL, computed none, and generated the answers.
    assert delta("decode", PROMPT_NIXL) == prompt_tokens
    assert delta("decode", PROMPT_LOCAL) == 0
    assert delta("decode", GENERATED) == completion_tokens


# A third engine start (2-3 minutes on two cores): kept out of `make test` for its warm budget (D161); the serving
# check's real-engine module restarts either role and measures recovery (e2e/test_real_serving.py).
@pytest.mark.extended
def test_losing_the_decode_pod_shows_in_status_and_serving_recovers(kube_cluster: KubeCluster, served: Served) -> None:
    (decode,) = _pods(kube_cluster, served, "decode")
    kube_cluster.kubectl("delete", "pod", "-n", served.namespace, decode["metadata"]["name"], "--wait=false")

    def not_ready() -> dict[str, Any] | None:
        status = status_of(kube_cluster, served.namespace, served.name)
        return status if condition(status, "Ready").get("status") == "False" else None

    status = wait_for("Ready to turn False after the decode pod is gone", not_ready, timeout=60, every=0.5)
    assert status["phase"] in ("Degraded", "Progressing"), status
    wait_phase(kube_cluster, served.namespace, served.name, "Ready", timeout=READY_TIMEOUT)
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}

    def serves() -> bool:
        try:
            return bool(json.loads(_post(f"{served.endpoint}/v1/completions", body, timeout=60))["choices"][0]["text"])
        except OSError:
            return False

    wait_for("the endpoint to serve again with the new decode pod", serves, timeout=180, every=5)
