"""A stand-in for vLLM engines that cannot run here (no GPU): the same /health, /v1/models and /metrics.

Each simulated engine is an HTTP server bound to a fake pod's IP (the local cluster gives pods loopback IPs), so
the operator reaches it exactly as it would reach vLLM. Its metrics are produced by prometheus_client with vLLM
0.33's names, labels and metric types, and follow a simple model of a loaded engine:

* prefill: prompt tokens arrive at the pool's offered rate, split over its ready engines; an engine computes
  `capacity_tokens_per_s` while busy, so utilisation rho = offered / capacity; TTFT = service time of a prompt
  times an M/M/1 queueing factor 1 / (1 - rho), and the queue holds rho^2 / (1 - rho) requests.
* decode: the pool holds `concurrency` running requests, split over its engines; KV usage = running / slots;
  ITL = base + slope * usage (longer batches, slower steps).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    20.0,
)
TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass
class PoolLoad:
    """What the test asks of a pool right now; engines of the pool share it evenly."""

    prompt_tokens_per_s: float = 0.0
    prompt_tokens_per_request: float = 1024.0
    concurrency: float = 0.0
    output_tokens_per_s_per_request: float = 30.0
    engines: int = 1


@dataclass
class EngineModel:
    capacity_tokens_per_s: float = 20_000.0
    slots: float = 64.0
    itl_base_s: float = 0.02
    itl_slope_s: float = 0.06


@dataclass
class SimEngine:
    role: str
    ip: str
    port: int
    load: PoolLoad
    model: EngineModel = field(default_factory=EngineModel)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.success = Counter("vllm:request_success", "", [*labels, "finished_reason"], registry=self.registry)
        self.prompt = Counter("vllm:prompt_tokens", "", labels, registry=self.registry)
        self.generation = Counter("vllm:generation_tokens", "", labels, registry=self.registry)
        self.queries = Counter("vllm:prefix_cache_queries", "", labels, registry=self.registry)
        self.hits = Counter("vllm:prefix_cache_hits", "", labels, registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "", labels, registry=self.registry)
        self.running = Gauge("vllm:num_requests_running", "", labels, registry=self.registry)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "", labels, registry=self.registry)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "", labels, buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "", labels, buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.prompt_len = Histogram(
            "vllm:request_prompt_tokens", "", labels, buckets=TOKEN_BUCKETS, registry=self.registry
        )
        self.prefill_time = Histogram(
            "vllm:request_prefill_time_seconds", "", labels, buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def advance(self) -> None:
        """Move the counters and histograms forward by the time since the last scrape, under the current load."""
        with self._lock:
            now = time.monotonic()
            elapsed, self._last = now - self._last, now
            load, model, labels = self.load, self.model, ("sim", "0")
            engines = max(self.load.engines, 1)
            if self.role == "prefill":
                offered = load.prompt_tokens_per_s / engines
                rho = min(offered / model.capacity_tokens_per_s, 0.98)
                service = load.prompt_tokens_per_request / model.capacity_tokens_per_s
                requests = offered * elapsed / load.prompt_tokens_per_request
                self.waiting.labels(*labels).set(rho * rho / (1 - rho))
                self.running.labels(*labels).set(min(rho * 4, 4))
                self.kv.labels(*labels).set(min(rho, 0.95))
                ttft = service / (1 - rho)
                self._observe(requests, ttft, service, load.prompt_tokens_per_request)
                self.prompt.labels(*labels).inc(offered * elapsed)
                self.queries.labels(*labels).inc(offered * elapsed)
            else:
                running = load.concurrency / engines
                usage = min(running / model.slots, 1.0)
                itl = model.itl_base_s + model.itl_slope_s * usage
                tokens = running * load.output_tokens_per_s_per_request * elapsed
                self.running.labels(*labels).set(running)
                self.waiting.labels(*labels).set(max(running - model.slots, 0))
                self.kv.labels(*labels).set(usage)
                self.generation.labels(*labels).inc(tokens)
                for _ in range(min(int(tokens), 200)):
                    self.itl.labels(*labels).observe(itl)
                self.success.labels(*labels, "stop").inc(tokens / 200)

    def _observe(self, requests: float, ttft: float, service: float, prompt_tokens: float) -> None:
        labels = ("sim", "0")
        count = int(requests)
        for _ in range(min(count, 500)):
            self.ttft.labels(*labels).observe(ttft)
            self.prompt_len.labels(*labels).observe(prompt_tokens)
            self.prefill_time.labels(*labels).observe(service)
        self.success.labels(*labels, "length").inc(count)

    def start(self) -> None:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    engine.advance()
                    self._send(200, generate_latest(engine.registry), "text/plain; version=0.0.4")
                elif self.path in ("/health", "/ping"):
                    self._send(200, b"", "text/plain")
                elif self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": "sim", "object": "model"}]})
                    self._send(200, body.encode(), "application/json")
                else:
                    self._send(404, b"", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.ip, self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name=f"sim-{self.ip}").start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _listen_port(program: str, args: list[str]) -> int:
    """The port the real program would listen on, from its own arguments."""
    if program == "lmcache_server":  # lmcache_server HOST PORT [STORAGE]
        return int(args[1])
    for index, arg in enumerate(args):
        if arg == "--port":
            return int(args[index + 1])
        if arg.startswith(("--rpc_port=", "-rpc_port=")):
            return int(arg.split("=", 1)[1])
    return 50051 if program == "mooncake_master" else 8000


def main(argv: list[str] | None = None) -> None:
    """`vllm serve MODEL [--port N] ...`, `vllm launch render ...`, `mooncake_master ...` or `lmcache_server ...` on
    clusters that run real containers without GPUs (kind): an idle process that answers health checks on the
    program's port and serves vLLM-format /metrics."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    program = os.environ.get("DISAGG_SIM_PROGRAM", "vllm")
    port = _listen_port(program, args)
    engine = SimEngine("decode", "0.0.0.0", port, PoolLoad())
    engine.start()
    print(f"simulated {program} {' '.join(args[:2])} on :{port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
