"""Run the engine image for real: one engine answering a completion and a chat completion, or a NIXL P/D pair.

`python -m e2e.images smoke [--pd]`. Containers use the host network (the private dockerd has no bridge), bind
127.0.0.1 on free ports, and are removed afterwards whatever happens. Heavy: one or two vLLM CPU engines.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .dockerd import Dockerd

MODEL = "/opt/models/tiny-qwen3"
READY_TIMEOUT_SECONDS = 600.0
# A prompt long enough to fill more than one KV block, so the transfer is more than a token.
PD_PROMPT = (
    "Prefill computes the key and value cache of the prompt; decode loads it and generates one token at a time. "
    "The router sends a request to a prefill engine first, then to a decode engine with the transfer parameters."
)


class SmokeError(RuntimeError):
    pass


@dataclass(frozen=True)
class Engine:
    name: str
    port: int
    kv_role: str | None = None  # kv_producer / kv_consumer for a NIXL pair
    side_channel_port: int | None = None
    cpu: int | None = None  # the core its OpenMP threads are bound to (two engines must not share one)
    env: tuple[tuple[str, str], ...] = field(default=())


def kv_transfer_config(role: str) -> str:
    return json.dumps(
        {
            "kv_connector": "NixlConnector",
            "kv_role": role,
            "kv_buffer_device": "cpu",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        },
        separators=(",", ":"),
    )


def run_argv(image: str, engine: Engine, *, kv_cache_gib: int = 1, enforce_eager: bool = True) -> list[str]:
    """`docker run` arguments for one engine: the CPU settings an engine needs here and nothing the operator renders
    differently (the side channel comes from VLLM_NIXL_SIDE_CHANNEL_HOST/PORT, as in a rendered pod)."""
    env = {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "PYTHONHASHSEED": "0", **dict(engine.env)}
    if engine.cpu is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(engine.cpu)
    if engine.side_channel_port is not None:
        env.update(
            VLLM_NIXL_SIDE_CHANNEL_HOST="127.0.0.1",
            VLLM_NIXL_SIDE_CHANNEL_PORT=str(engine.side_channel_port),
            UCX_NET_DEVICES="all",
        )
    argv = ["run", "--detach", "--name", engine.name, "--network", "host", "--shm-size", "1g"]
    for name, value in sorted(env.items()):
        argv += ["--env", f"{name}={value}"]
    argv += [image, "serve", MODEL, "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(engine.port)]
    argv += ["--max-model-len", "2048"]
    if enforce_eager:
        argv.append("--enforce-eager")
    if engine.kv_role is not None:
        argv += ["--kv-transfer-config", kv_transfer_config(engine.kv_role)]
    return argv


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to {'name{labels}': value}; labels kept verbatim (enough to pick one series)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            values[series] = float(value)
        except ValueError:
            continue
    return values


def metric(values: Mapping[str, float], name: str, **labels: str) -> float:
    """Sum of the series of `name` whose labels include `labels`."""
    total = 0.0
    for series, value in values.items():
        base, _, rest = series.partition("{")
        if base != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


def parse_mem_usage(text: str) -> float:
    """`docker stats` MemUsage ('2.858GiB / 23.54GiB') to GiB."""
    used = text.split("/")[0].strip()
    match = re.fullmatch(r"([0-9.]+)\s*([KMG]i?B|B)", used)
    if match is None:
        raise ValueError(f"unexpected memory usage {text!r}")
    scale = {"B": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "KB": 1e3 / 2**30, "MB": 1e6 / 2**30}
    return float(match.group(1)) * scale.get(match.group(2), 1e9 / 2**30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(port: int, path: str, body: dict[str, Any], request_id: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **({"X-Request-Id": request_id} if request_id else {})}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return parse_metrics(response.read().decode())


class Engines:
    """Started engine containers, removed on exit."""

    def __init__(self, docker: Dockerd, image: str) -> None:
        self.docker = docker
        self.image = image
        self.started: list[Engine] = []

    def __enter__(self) -> Engines:
        return self

    def __exit__(self, *_: object) -> None:
        if self.started:
            self.docker.run(["rm", "--force", *(e.name for e in self.started)], check=False)

    def start(self, engines: Sequence[Engine]) -> float:
        """Start all, wait until every one answers /health; returns the seconds that took."""
        begun = time.monotonic()
        for engine in engines:
            self.docker.run(run_argv(self.image, engine))
            self.started.append(engine)
        pending = list(engines)
        while pending:
            if time.monotonic() - begun > READY_TIMEOUT_SECONDS:
                raise SmokeError(f"{', '.join(e.name for e in pending)} not ready in {READY_TIMEOUT_SECONDS:.0f} s")
            for engine in list(pending):
                state = self.docker.run(["inspect", "--format", "{{.State.Running}}", engine.name]).stdout.strip()
                if state != "true":
                    logs = self.docker.run(["logs", "--tail", "40", engine.name], check=False)
                    raise SmokeError(f"{engine.name} exited:\n{logs.stdout}{logs.stderr}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{engine.port}/health", timeout=5):
                        pending.remove(engine)
                except OSError:
                    pass
            time.sleep(2)
        return time.monotonic() - begun

    def rss_gib(self, engine: Engine) -> float:
        out = self.docker.run(["stats", "--no-stream", "--format", "{{.MemUsage}}", engine.name]).stdout
        return parse_mem_usage(out.strip())


def serve(docker: Dockerd, image: str) -> dict[str, Any]:
    """One engine: a completion and a chat completion, text in and text out."""
    engine = Engine(f"disagg-smoke-{free_port()}", free_port())
    with Engines(docker, image) as engines:
        ready = engines.start([engine])
        completion = _post(engine.port, "/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 8})
        chat = _post(
            engine.port,
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "Hello, how are you?"}], "max_tokens": 8},
        )
        text = completion["choices"][0]["text"]
        answer = chat["choices"][0]["message"]["content"]
        if not text or not answer:
            raise SmokeError(f"empty answer: completion {completion}, chat {chat}")
        return {
            "ready_seconds": round(ready, 1),
            "rss_gib": round(engines.rss_gib(engine), 2),
            "completion": text,
            "chat": answer,
            "completion_tokens": completion["usage"]["completion_tokens"] + chat["usage"]["completion_tokens"],
        }


def prefill_decode(docker: Dockerd, image: str) -> dict[str, Any]:
    """A NIXL pull pair: prefill computes the prompt, decode loads all of it over NIXL and recomputes none."""
    tag = free_port()
    prefill = Engine(f"disagg-smoke-prefill-{tag}", free_port(), "kv_producer", free_port(), cpu=0)
    decode = Engine(f"disagg-smoke-decode-{tag}", free_port(), "kv_consumer", free_port(), cpu=1)
    request_id = f"disagg-smoke-{tag}"
    with Engines(docker, image) as engines:
        ready = engines.start([prefill, decode])
        first = _post(
            prefill.port,
            "/v1/completions",
            {
                "model": MODEL,
                "prompt": PD_PROMPT,
                "max_tokens": 1,
                "kv_transfer_params": {
                    "do_remote_decode": True,
                    "do_remote_prefill": False,
                    "remote_engine_id": None,
                    "remote_block_ids": None,
                    "remote_host": None,
                    "remote_port": None,
                },
            },
            request_id,
        )
        params = first.get("kv_transfer_params")
        if not params or params.get("remote_port") != prefill.side_channel_port:
            raise SmokeError(f"prefill returned no usable kv_transfer_params: {first}")
        second = _post(
            decode.port,
            "/v1/completions",
            {"model": MODEL, "prompt": PD_PROMPT, "max_tokens": 8, "kv_transfer_params": params},
            request_id,
        )
        prompt_tokens = int(second["usage"]["prompt_tokens"])
        on_decode, on_prefill = _metrics(decode.port), _metrics(prefill.port)
        report = {
            "ready_seconds": round(ready, 1),
            "rss_gib": {"prefill": round(engines.rss_gib(prefill), 2), "decode": round(engines.rss_gib(decode), 2)},
            "prompt_tokens": prompt_tokens,
            "prefill_local_compute": metric(on_prefill, "vllm:prompt_tokens_by_source_total", source="local_compute"),
            "decode_external_kv_transfer": metric(
                on_decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"
            ),
            "decode_local_compute": metric(on_decode, "vllm:prompt_tokens_by_source_total", source="local_compute"),
            "decode_text": second["choices"][0]["text"],
        }
        if report["decode_external_kv_transfer"] != prompt_tokens or report["decode_local_compute"] != 0:
            raise SmokeError(f"decode did not load the whole prompt over NIXL: {report}")
        return report
