"""Engine pods for the in-process autoscaler tier: Pod objects in the fake API server, each with a vLLM-format
/metrics endpoint at its pod IP, so the scaler's real metrics source scrapes them over HTTP.

Every pod gets its own loopback address (127.0.0.N; Linux routes all of 127/8 to the loopback device) and the
endpoints share one free port, which the test hands to `DirectSource(port=...)`. The numbers follow the test's
clock, not the wall clock: between two scrapes the counters grow by exactly rate x elapsed test seconds, so the
window the scaler computes is the load the test set. The load model is the policy's own prior (docs/autoscaling.md):
a decode engine's ITL is 6.25 ms + 31.25 ms x its KV usage, a prefill engine computes 40k prompt tokens per busy
second and queues like M/M/1.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from disagg.names import LABEL_ROLE
from tests.support.fake_kube import FakeApiServer

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
TOKEN_BUCKETS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class PoolLoad:
    """What the test asks of a pool; its ready engines share it evenly."""

    requests_per_s: float = 0.0
    """Prefill: requests entering the pool."""
    prompt_tokens: float = 2000.0
    """Prefill: prompt length of every request."""
    sequences: float = 0.0
    """Decode: sequences being generated across the pool."""
    usage_per_sequence: float = 0.0105
    """Decode: share of one engine's KV cache a sequence holds."""


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, count: float) -> None:
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        self.counts[index] += count
        self.total += value * count

    def lines(self, name: str) -> list[str]:
        out, cumulative = [f"# TYPE {name} histogram"], 0.0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(f'{name}_bucket{{model_name="m",le="{le}"}} {cumulative}')
        out += [f'{name}_sum{{model_name="m"}} {self.total}', f'{name}_count{{model_name="m"}} {cumulative}']
        return out


class Engine:
    """One simulated engine: its counters move on with the test clock at every scrape."""

    CAPACITY_TOKENS_PER_S = 40_000.0

    def __init__(self, role: str, pool: Callable[[], tuple[PoolLoad, int]], clock: Callable[[], float]) -> None:
        self.role = role
        self._pool = pool
        self._clock = clock
        self._last = clock()
        self.scrapes = 0
        self.answering = True
        self.counters = dict.fromkeys(
            ("request_success", "prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits"), 0.0
        )
        self.gauges = {"num_requests_waiting": 0.0, "num_requests_running": 0.0, "kv_cache_usage_perc": 0.0}
        self.histograms = {
            "time_to_first_token_seconds": _Histogram(LATENCY_BUCKETS),
            "inter_token_latency_seconds": _Histogram(LATENCY_BUCKETS),
            "request_prompt_tokens": _Histogram(TOKEN_BUCKETS),
            "request_prefill_time_seconds": _Histogram(LATENCY_BUCKETS),
        }

    def advance(self) -> None:
        now = self._clock()
        elapsed, self._last = now - self._last, now
        load, engines = self._pool()
        engines = max(engines, 1)
        if self.role == "prefill":
            requests = load.requests_per_s / engines
            offered = requests * load.prompt_tokens
            rho = min(offered / self.CAPACITY_TOKENS_PER_S, 0.95)
            service = load.prompt_tokens / self.CAPACITY_TOKENS_PER_S
            count = requests * elapsed
            self.counters["request_success"] += count
            self.counters["prompt_tokens"] += offered * elapsed
            self.counters["prefix_cache_queries"] += offered * elapsed
            self.gauges["num_requests_waiting"] = rho * rho / (1 - rho)
            self.gauges["num_requests_running"] = rho
            self.histograms["time_to_first_token_seconds"].observe(service / (1 - rho), count)
            self.histograms["request_prompt_tokens"].observe(load.prompt_tokens, count)
            self.histograms["request_prefill_time_seconds"].observe(service, count)
        else:
            running = load.sequences / engines
            usage = min(running * load.usage_per_sequence, 1.0)
            itl = 0.00625 + 0.03125 * usage
            tokens = running / itl * elapsed
            self.counters["generation_tokens"] += tokens
            self.counters["request_success"] += tokens / 500
            self.gauges["num_requests_running"] = running
            self.gauges["kv_cache_usage_perc"] = usage
            self.histograms["inter_token_latency_seconds"].observe(itl, tokens)

    def text(self) -> str:
        lines = []
        for name, value in self.counters.items():
            lines += [f"# TYPE vllm:{name}_total counter", f'vllm:{name}_total{{model_name="m"}} {value}']
        for name, value in self.gauges.items():
            lines += [f"# TYPE vllm:{name} gauge", f'vllm:{name}{{model_name="m"}} {value}']
        for name, histogram in self.histograms.items():
            lines += histogram.lines(f"vllm:{name}")
        return "\n".join(lines) + "\n"


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class EnginePods:
    """Plays the kubelets and the workload controllers for the pools: `sync()` makes every engine Deployment's pods
    exist, be Ready at their own IP and serve metrics, and reports the Deployment fully ready."""

    def __init__(self, server: FakeApiServer, namespace: str, clock: Callable[[], float]) -> None:
        self.server = server
        self.namespace = namespace
        self.clock = clock
        self.loads: dict[str, PoolLoad] = {"prefill": PoolLoad(), "decode": PoolLoad()}
        self.engines: dict[str, Engine] = {}
        self._ips: dict[str, str] = {}
        self._running: set[str] = set()
        self._runners: list[web.AppRunner] = []
        self.port = 0

    async def __aenter__(self) -> EnginePods:
        self.port = _free_port("127.0.0.2")
        return self

    async def __aexit__(self, *_: Any) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def ready(self, role: str) -> int:
        return sum(1 for pod, engine in self.engines.items() if engine.role == role and pod in self._running)

    def engine(self, pod: str) -> Engine:
        return self.engines[pod]

    async def _start_engine(self, pod: str, role: str) -> str:
        """A fresh engine (a new pod's counters start at zero) at the pod's address, bound on first use."""
        self.engines[pod] = Engine(role, lambda: (self.loads[role], self.ready(role)), self.clock)
        if pod in self._ips:
            return self._ips[pod]
        ip = self._ips[pod] = f"127.0.0.{len(self._ips) + 2}"

        async def metrics(_: web.Request) -> web.Response:
            engine = self.engines[pod]
            if pod not in self._running or not engine.answering:
                return web.Response(status=503, text="engine not serving")
            engine.scrapes += 1
            engine.advance()
            return web.Response(text=engine.text(), content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, ip, self.port).start()
        self._runners.append(runner)
        return ip

    async def sync(self) -> None:
        for workload in self.server.objects("Deployment", self.namespace):
            template = workload["spec"]["template"]
            role = template["metadata"]["labels"].get(LABEL_ROLE)
            name, replicas = workload["metadata"]["name"], workload["spec"].get("replicas", 1)
            for index in range(replicas):
                pod = f"{name}-{index}"
                if self.server.get("Pod", self.namespace, pod) is None:
                    ip = await self._start_engine(pod, role) if role in self.loads else f"127.1.0.{index + 2}"
                    self._create_pod(pod, template, ip)
                    self._running.add(pod)
            for pod in self.server.objects("Pod", self.namespace):
                pod_name = pod["metadata"]["name"]
                index = pod_name.removeprefix(f"{name}-")
                if index.isdigit() and int(index) >= replicas:
                    self.server.remove("Pod", self.namespace, pod_name)
                    self._running.discard(pod_name)
            self.server.set_status(
                "Deployment",
                self.namespace,
                name,
                {
                    "replicas": replicas,
                    "readyReplicas": replicas,
                    "updatedReplicas": replicas,
                    "observedGeneration": workload["metadata"]["generation"],
                },
            )

    def _create_pod(self, name: str, template: dict[str, Any], ip: str) -> None:
        containers = template["spec"]["containers"]
        self.server.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": template["metadata"]["labels"]},
                "spec": {"containers": [{"name": c["name"], "image": c["image"]} for c in containers]},
                "status": {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
            manager="kubelet",
        )
