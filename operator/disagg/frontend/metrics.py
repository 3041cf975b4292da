"""The frontend's Prometheus metrics (shell). User traffic and pair probes are counted apart, so a probe never
shows up as user traffic (and an autoscaler reading these never sees it)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.requests = Counter(
            "disagg_frontend_requests",
            "Client requests answered, by flow, API and HTTP status code.",
            ["flow", "api", "code"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "disagg_frontend_request_duration_seconds",
            "Client request time from arrival to the last byte sent.",
            ["flow", "api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.added_seconds = Histogram(
            "disagg_frontend_added_latency_seconds",
            "The frontend's own share of a request's time to first byte: arrival to first byte sent, minus the "
            "time spent waiting on engines (render, prefill, decode to its first chunk).",
            ["flow"],
            buckets=(
                0.0001,
                0.0002,
                0.0003,
                0.0004,
                0.0005,
                0.0006,
                0.0008,
                0.001,
                0.0015,
                0.002,
                0.003,
                0.004,
                0.005,
                0.0075,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                1,
            ),
            registry=r,
        )
        self.leg_seconds = Histogram(
            "disagg_frontend_leg_duration_seconds",
            "Engine leg time (prefill: whole response; decode: to the response headers; render/derender: whole).",
            ["role", "flow"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.leg_errors = Counter(
            "disagg_frontend_leg_errors",
            "Engine legs that failed, by role and reason (status, timeout, connect, aborted).",
            ["role", "flow", "reason"],
            registry=r,
        )
        self.inflight = Gauge("disagg_frontend_inflight_requests", "Client requests in flight.", ["role"], registry=r)
        self.engines = Gauge(
            "disagg_frontend_engines",
            "Serving engines the frontend knows, by role and pairing revision.",
            ["role", "revision"],
            registry=r,
        )
        self.kv_handoffs = Counter(
            "disagg_frontend_kv_handoffs",
            "Prefill-to-decode hand-offs: handed_off (prefill returned kv_transfer_params), missing (it returned "
            "none, decode computed the prompt itself), concurrent (push/MoRI-IO write: coordinates sent up front).",
            ["flow", "outcome"],
            registry=r,
        )
        self.readbacks = Counter(
            "disagg_frontend_conversation_readbacks",
            "Bidirectional turns: hit (prefill read the history back from decode), miss (no stored params), "
            "lost (the decode engine holding them is gone or of another revision).",
            ["outcome"],
            registry=r,
        )
        self.conversations = Gauge(
            "disagg_frontend_conversations", "Conversations with stored decode KV params.", registry=r
        )
        self.conversation_evictions = Counter(
            "disagg_frontend_conversation_evictions",
            "Conversation entries dropped: expired (TTL) or evicted (capacity).",
            ["reason"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "disagg_frontend_prompt_tokens", "Prompt tokens of served requests.", ["flow"], registry=r
        )
        self.prefill_cached_tokens = Counter(
            "disagg_frontend_prefill_cached_tokens",
            "Prompt tokens prefill did not compute (its cache hits plus KV read back from decode), as prefill "
            "reports them in remote_prefill_cached_tokens.",
            ["flow"],
            registry=r,
        )
        self.no_pair = Counter(
            "disagg_frontend_no_pair", "Requests refused with 503 because no pair could serve.", registry=r
        )
        self.drained_pairs = Gauge("disagg_frontend_drained_pairs", "Prefill/decode pairs drained.", registry=r)
        self.probes = Counter(
            "disagg_frontend_probes", "Pair probes by result (ok, failed, timeout).", ["result"], registry=r
        )
        self.probe_seconds = Histogram(
            "disagg_frontend_probe_duration_seconds", "Pair probe latency.", buckets=_LATENCY_BUCKETS, registry=r
        )

    def at(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, remembered: the lookup is a lock and a tuple build on every request."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)
