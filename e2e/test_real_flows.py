"""Every P/D flow vLLM CPU can run, served through the endpoint the operator deploys: its own frontend.

The operator runs in the cluster from its image, installed with Helm (as in test_real_engines.py), and deploys three
DisaggDeployments on the real node, one after the other (e2e/specs/tiny-frontend-*.yaml): real vLLM CPU engines
(images/vllm-cpu) behind `disagg frontend`, which the operator renders from its own image and which finds the
engines through their pods. Every figure comes from the engines' own metrics (`vllm:prompt_tokens_by_source_total`,
or the frontend's (`disagg_frontend_*`), so each test fails when what it proves stops happening:

- pull: prefill computes every prompt token, decode loads them all over NIXL and computes none;
- bidirectional multi-turn: turn 2's prefill computes at most the new tokens plus one block, reading the history
  back from decode (the same turn without a conversation id computes everything);
- render tier: a chat request returns text through render -> generate on --tokens-only engines -> derender;
- push: decode gets the whole prompt written by prefill (after one warm-up request per pair) and computes none.

Engines are heavy (about 3 GB and one core each), so the module holds the machine's real-engine slot and runs one
deployment at a time (one test class each).
"""

from __future__ import annotations

import json
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.localcluster.testing import KubeCluster
from e2e.operator_support import install_crd, wait_phase
from e2e.realnode_support import (
    GENERATED,
    PROMPT_LOCAL,
    PROMPT_NIXL,
    REPO_ROOT,
    HelmRelease,
    Served,
    engine_metrics,
    engines_turn,
    ensure_namespace,
    load_images,
    metrics_of,
    pods_of,
    post_json,
    real_document,
    require_real_node,
    serving,
    stream_chunks,
)

pytestmark = [pytest.mark.e2e, pytest.mark.real_engines, pytest.mark.extended, pytest.mark.timeout(3600)]

SPECS = REPO_ROOT / "e2e" / "specs"
READY_TIMEOUT = 900.0
BLOCK = 16
"""vLLM CPU's KV block size."""
PROMPT_IDS = [(i * 7) % 490 + 10 for i in range(150)]
"""Token ids inside the tiny model's vocabulary."""


@dataclass(frozen=True)
class Module:
    kube: KubeCluster
    images: dict[str, str]
    namespaces: dict[str, str]
    operator_namespace: str


@pytest.fixture(scope="module")
def module(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    require_real_node(kube_cluster)
    images = load_images("operator", "vllm-cpu")
    suffix = uuid.uuid4().hex[:6]
    namespaces = {flow: f"flows-{flow}-{suffix}" for flow in ("multiturn", "render", "push")}
    release = HelmRelease(f"dd-flows-{suffix}", f"disagg-flows-{suffix}", tmp_path_factory.mktemp("helm-home"))
    with engines_turn():
        install_crd(kube_cluster)
        for namespace in namespaces.values():  # the chart's Roles live in the watched namespaces
            ensure_namespace(kube_cluster, namespace)
        release.install(
            kube_cluster, images["operator"], list(namespaces.values()), "--set", "operator.resyncSeconds=30"
        )
        try:
            yield Module(kube_cluster, images, namespaces, release.namespace)
        finally:
            release.uninstall(kube_cluster)


def deploy(module: Module, flow: str, spec: str) -> Iterator[Served]:
    document = real_document(SPECS / spec, module.images)
    with serving(module.kube, module.namespaces[flow], document, READY_TIMEOUT) as served:
        yield served


def completion(served: Served, prompt: Any, max_tokens: int = 8, **extra: Any) -> tuple[dict[str, str], Any]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, **extra}
    headers, raw = post_json(f"{served.endpoint}/v1/completions", body)
    return headers, json.loads(raw)


def chat(served: Served, content: str, max_tokens: int = 8, **extra: Any) -> tuple[dict[str, str], bytes]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}
    return post_json(f"{served.endpoint}/v1/chat/completions", body)


def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def assert_the_operator_deployed_its_frontend(kube: KubeCluster, module: Module, served: Served) -> None:
    (router,) = pods_of(kube, served, "router")
    (container,) = router["spec"]["containers"]
    assert container["image"] == module.images["operator"], "the frontend runs from the operator's own image"
    assert container["command"] == ["disagg", "frontend"]
    assert all(status["ready"] for status in router["status"]["containerStatuses"])


# ---- pull and bidirectional multi-turn ---------------------------------------------------------------------------


class TestPullAndMultiTurn:
    @pytest.fixture(scope="class")
    def served(self, module: Module) -> Iterator[Served]:
        yield from deploy(module, "multiturn", "tiny-frontend-bidirectional.yaml")

    def test_the_endpoint_is_the_operators_frontend_pairing_one_revision(
        self, kube_cluster: KubeCluster, module: Module, served: Served
    ) -> None:
        assert_the_operator_deployed_its_frontend(kube_cluster, module, served)
        status = kube_cluster.get("disaggdeployment", served.name, "-n", served.namespace)["status"]
        (prefill,) = pods_of(kube_cluster, served, "prefill")
        (decode,) = pods_of(kube_cluster, served, "decode")
        for pod in (prefill, decode):
            assert pod["metadata"]["labels"]["disagg.dev/pairing-revision"] == status["pairingRevision"]
        headers, answer = completion(served, PROMPT_IDS, 4)
        assert answer["choices"][0]["text"]
        assert headers["X-Disagg-Prefill"] == prefill["metadata"]["name"]
        assert headers["X-Disagg-Decode"] == decode["metadata"]["name"]
        assert headers["X-Disagg-Pairing-Revision"] == status["pairingRevision"]
        service = kube_cluster.get("service", served.name, "-n", served.namespace)
        assert service["spec"]["sessionAffinity"] == "ClientIP"
        assert [port["targetPort"] for port in service["spec"]["ports"]] == ["http"]

    def test_pull_prefill_computes_and_decode_loads_every_prompt_token_over_nixl(
        self, kube_cluster: KubeCluster, served: Served
    ) -> None:
        before = {role: engine_metrics(kube_cluster, served, role) for role in ("prefill", "decode")}
        prompt_tokens = completion_tokens = 0
        text = "The operator renders prefill and decode engines, and the frontend sends every request to both. " * 3
        _, answer = completion(served, text)
        prompt_tokens += answer["usage"]["prompt_tokens"]
        completion_tokens += answer["usage"]["completion_tokens"]
        _, raw = chat(served, text, ignore_eos=True)
        answer = json.loads(raw)
        assert answer["choices"][0]["message"]["content"], answer
        prompt_tokens += answer["usage"]["prompt_tokens"]
        completion_tokens += answer["usage"]["completion_tokens"]
        _, raw = chat(served, text[::-1], stream=True, stream_options={"include_usage": True}, ignore_eos=True)
        chunks = stream_chunks(raw)
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        prompt_tokens += chunks[-1]["usage"]["prompt_tokens"]
        completion_tokens += chunks[-1]["usage"]["completion_tokens"]
        after = {role: engine_metrics(kube_cluster, served, role) for role in ("prefill", "decode")}
        print(
            f"pull through the frontend: {prompt_tokens} prompt tokens; prefill computed "
            f"{delta(after['prefill'], before['prefill'], PROMPT_LOCAL):.0f}; decode loaded "
            f"{delta(after['decode'], before['decode'], PROMPT_NIXL):.0f} over NIXL and computed "
            f"{delta(after['decode'], before['decode'], PROMPT_LOCAL):.0f}"
        )
        assert prompt_tokens > 3 * 50
        assert delta(after["prefill"], before["prefill"], PROMPT_LOCAL) == prompt_tokens
        assert delta(after["prefill"], before["prefill"], GENERATED) == 3
        assert delta(after["decode"], before["decode"], PROMPT_NIXL) == prompt_tokens
        assert delta(after["decode"], before["decode"], PROMPT_LOCAL) == 0
        assert delta(after["decode"], before["decode"], GENERATED) == completion_tokens

    def test_turn_two_reads_the_history_back_from_decode(self, kube_cluster: KubeCluster, served: Served) -> None:
        warm_up_the_readback_handshake(kube_cluster, served)
        conversation = f"c-{uuid.uuid4().hex[:8]}"
        frontend_before = metrics_of(f"{served.endpoint}/metrics")
        _, turn1 = completion(served, PROMPT_IDS, 8, conversation_id=conversation, return_token_ids=True)
        history = PROMPT_IDS + turn1["choices"][0]["token_ids"]
        new = [(i * 11) % 490 + 10 for i in range(40)]
        before = engine_metrics(kube_cluster, served, "prefill")
        _, turn2 = completion(served, history + new, 8, conversation_id=conversation, return_token_ids=True)
        after = engine_metrics(kube_cluster, served, "prefill")
        # The same second turn without a conversation id: no readback, so prefill computes all of it.
        _, control = completion(served, history + new[::-1], 8)
        after_control = engine_metrics(kube_cluster, served, "prefill")
        frontend_after = metrics_of(f"{served.endpoint}/metrics")
        n2 = turn2["usage"]["prompt_tokens"]
        computed = delta(after, before, PROMPT_LOCAL)
        read_back = delta(after, before, PROMPT_NIXL)
        print(
            f"bidirectional through the frontend: turn 2 prompt {n2} ({len(new)} new); prefill computed {computed:.0f} "
            f"and read {read_back:.0f} back from decode; without a conversation id it computed "
            f"{delta(after_control, after, PROMPT_LOCAL):.0f} of {control['usage']['prompt_tokens']}"
        )
        assert computed <= len(new) + BLOCK
        assert read_back >= n2 - len(new) - BLOCK
        assert delta(after_control, after, PROMPT_LOCAL) == control["usage"]["prompt_tokens"]
        hits = "disagg_frontend_conversation_readbacks_total{outcome=hit}"
        assert delta(frontend_after, frontend_before, hits) == 1


def warm_up_the_readback_handshake(kube: KubeCluster, served: Served, attempts: int = 3) -> None:
    """The first readback makes prefill open its NIXL handshake with decode, and vLLM 0.32 waits 5 s for the reply
    (hard-coded); a loaded 2-core machine can miss that, failing the turn (kv_load_failure_policy fail). One
    conversation before the measured one builds that handshake; a failed one is retried (vLLM handshakes again)."""
    for attempt in range(attempts):
        conversation = f"warm-{uuid.uuid4().hex[:8]}"
        try:
            _, turn1 = completion(served, PROMPT_IDS[:40], 2, conversation_id=conversation, return_token_ids=True)
            completion(
                served, PROMPT_IDS[:40] + turn1["choices"][0]["token_ids"] + [11, 12], 2, conversation_id=conversation
            )
            return
        except urllib.error.HTTPError as err:
            # A failed handshake can also fail the serving check's probes and get an engine recreated (the
            # remediation): the next attempt waits for the deployment to serve again.
            print(f"readback warm-up {attempt + 1} failed: {err}; {err.read().decode(errors='replace')[:300]}")
            wait_phase(kube, served.namespace, served.name, "Ready", timeout=READY_TIMEOUT)
    pytest.fail(f"no readback succeeded in {attempts} warm-up conversations")


# ---- the render tier ----------------------------------------------------------------------------------------------


class TestRenderTier:
    @pytest.fixture(scope="class")
    def served(self, module: Module) -> Iterator[Served]:
        yield from deploy(module, "render", "tiny-frontend-render.yaml")

    def test_a_chat_request_through_the_render_tier_returns_text(
        self, kube_cluster: KubeCluster, module: Module, served: Served
    ) -> None:
        assert_the_operator_deployed_its_frontend(kube_cluster, module, served)
        before = engine_metrics(kube_cluster, served, "decode")
        _, raw = chat(served, "Plan the next tool call for the agent. " * 6, temperature=0)
        answer = json.loads(raw)
        after = engine_metrics(kube_cluster, served, "decode")
        print(f"render tier: {json.dumps(answer)[:300]}")
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
        # The engines only take token ids: the text came from the render tier's derender step.
        assert delta(after, before, PROMPT_NIXL) == answer["usage"]["prompt_tokens"]
        _, raw = chat(served, "Plan the next tool call for the agent. " * 5, stream=True)
        chunks = [c for c in stream_chunks(raw) if c.get("choices")]
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)

    def test_the_engines_refuse_text_themselves(self, kube_cluster: KubeCluster, served: Served) -> None:
        """Guard for the test above: without the render tier's hops, the tokens-only engines cannot serve chat."""
        (decode,) = pods_of(kube_cluster, served, "decode")
        with pytest.raises(OSError):
            post_json(
                f"http://{decode['status']['podIP']}:8000/v1/chat/completions",
                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            )


# ---- push ----------------------------------------------------------------------------------------------------------


class TestPush:
    @pytest.fixture(scope="class")
    def served(self, module: Module) -> Iterator[Served]:
        yield from deploy(module, "push", "tiny-frontend-push.yaml")

    def test_decode_gets_the_whole_prompt_written_by_prefill(
        self, kube_cluster: KubeCluster, module: Module, served: Served
    ) -> None:
        assert_the_operator_deployed_its_frontend(kube_cluster, module, served)
        # Warm-up: the first decode->prefill handshake builds descriptors for all of prefill's blocks.
        _, warm = completion(served, PROMPT_IDS[:40], 2)
        assert warm["choices"], warm
        before = engine_metrics(kube_cluster, served, "decode")
        _, answer = completion(served, PROMPT_IDS, 8)
        after = engine_metrics(kube_cluster, served, "decode")
        n = answer["usage"]["prompt_tokens"]
        print(
            f"push through the frontend: prompt {n}; decode got {delta(after, before, PROMPT_NIXL):.0f} pushed and "
            f"computed {delta(after, before, PROMPT_LOCAL):.0f}"
        )
        assert delta(after, before, PROMPT_NIXL) == n
        assert delta(after, before, PROMPT_LOCAL) == 0
        frontend = metrics_of(f"{served.endpoint}/metrics")
        # Both legs went out at once for both requests (the frontend counts a concurrent hand-off per request).
        assert frontend.get("disagg_frontend_kv_handoffs_total{outcome=concurrent}", 0) >= 2
