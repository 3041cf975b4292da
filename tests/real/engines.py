"""Start real vLLM CPU engines (the venv of tests/real/env.sh) and the frontend as processes on this machine."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny"
BLOCK_SIZE = 16
"""vLLM CPU's default KV block size."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def venv_python() -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "tests" / "real" / "env.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


def make_model(python: Path, directory: Path) -> Path:
    """The engine image's tiny model (images/vllm-cpu/make_tiny_model.py: a 2-layer Qwen3, vocabulary of a BPE
    trained at build time), written with the venv's own transformers."""
    script = REPO / "images" / "vllm-cpu" / "make_tiny_model.py"
    subprocess.run([str(python), str(script), str(directory)], check=True, stdout=subprocess.DEVNULL)
    return directory


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when pytest dies, however it dies (a killed run left engines spinning)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


PR_SET_PDEATHSIG = 1


def start(name: str, argv: list[str], env: dict[str, str], url: str, log_dir: Path) -> Process:
    log = log_dir / f"{name}.log"
    handle = log.open("wb")
    popen = subprocess.Popen(
        ["nice", "-n", "10", *argv],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    return Process(name, popen, url, log)


def wait_healthy(processes: list[Process], timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    pending = list(processes)
    while pending:
        for process in list(pending):
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(process.url + "/health", timeout=5) as r:
                if r.status == 200:
                    pending.remove(process)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{[p.name for p in pending]} not healthy after {timeout:.0f} s:\n{pending[0].tail()}")
        time.sleep(2)


def engine(
    python: Path,
    model: Path,
    name: str,
    log_dir: Path,
    *,
    kv_config: dict[str, Any] | None,
    side_channel_port: int | None = None,
    core: int | None = None,
    extra: list[str] | None = None,
) -> Process:
    port = free_port()
    argv = [
        str(python.parent / "vllm"),
        "serve",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--load-format",
        "dummy",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--num-gpu-blocks-override",
        "512",
    ]
    if kv_config is not None:
        argv += ["--kv-transfer-config", json.dumps(kv_config)]
    argv += extra or []
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    if side_channel_port is not None:
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_channel_port)
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    return start(name, argv, env, f"http://127.0.0.1:{port}", log_dir)


def render_server(python: Path, model: Path, log_dir: Path) -> Process:
    port = free_port()
    argv = [
        str(python.parent / "vllm"),
        "launch",
        "render",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "2048",
    ]
    return start("render", argv, {"PYTHONUNBUFFERED": "1"}, f"http://127.0.0.1:{port}", log_dir)


def frontend(args: list[str], log_dir: Path) -> Process:
    port, admin = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "disagg",
        "frontend",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--admin-port",
        str(admin),
        "--discovery",
        "static",
        "--model",
        MODEL_NAME,
        *args,
    ]
    process = start("frontend", argv, {}, f"http://127.0.0.1:{port}", log_dir)
    process.admin_url = f"http://127.0.0.1:{admin}"  # type: ignore[attr-defined]
    return process


@contextlib.contextmanager
def running(*processes: Process) -> Iterator[None]:
    try:
        wait_healthy(list(processes))
        yield
    except BaseException:
        for process in processes:
            print(f"---- {process.name} ({process.log})\n{process.tail(60)}")
        raise
    finally:
        for process in reversed(processes):
            process.stop()


def post(url: str, body: dict[str, Any], timeout: float = 300.0, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=timeout) as r:
        raw = r.read()
        return json.loads(raw) if r.headers.get("Content-Type", "").startswith("application/json") else raw


def post_raw(url: str, body: dict[str, Any], timeout: float = 300.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return r.status, dict(r.headers), r.read()


def tokens_by_source(url: str) -> dict[str, float]:
    """vllm:prompt_tokens_by_source_total per source, plus prompt/generation totals."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:prompt_tokens_by_source_total":
                source = sample.labels.get("source", "?")
                out[source] = out.get(source, 0.0) + sample.value
            elif sample.name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}
