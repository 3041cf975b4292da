"""Frontend benchmark against simulated engines (results: docs/performance.md, "P/D frontend").

1. Added latency: 256 concurrent streaming completions through the pull flow. Baseline: the load generator runs
   the two legs itself (prefill, then decode streaming), exactly the calls the frontend makes; then the same load
   through the frontend. Added latency = the frontend's percentile minus the baseline's, for time to first token
   and for the whole request.
2. Pull-flow throughput: non-streaming completions, engines answering at once, same concurrency and request count
   through our frontend and through vllm-router 0.1.17 (`--vllm-pd-disaggregation`, its venv from env.sh).
3. Memory over 100k conversations: bidirectional flow, every request a new conversation, a 5 s conversation TTL;
   the frontend's RSS is sampled every 10k requests.
Every process runs on this machine; the engines are e2e/pdsim.py in one process. Run: python bench/frontend/bench.py

`--pin` (the default on a machine with at least two CPUs) gives the proxy under test (our frontend, or vllm-router
in its turn) CPU 0 and everything else (the simulator, the load generator) the others, as a frontend pod with a
whole-CPU request gets a core of its own under the kubelet's static CPU manager policy: the figures are then the
proxy's own, not its wait for a core the load generator holds. `--no-pin` measures everything sharing every CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROMPT = " ".join(f"w{i}" for i in range(64))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


PROXY_CPUS: set[int] | None = None  # the proxy's CPUs under --pin; None: no pinning
OTHER_CPUS: set[int] | None = None


def pin(cpus: set[int] | None) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], cpus: set[int] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            preexec_fn=(lambda: pin(cpus)) if cpus is not None else None,
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


def sims(procs: Procs, connector: str, itl: float, bidirectional: bool = False) -> tuple[str, str]:
    p, d = free_port(), free_port()
    argv = [sys.executable, str(HERE / "sims.py"), connector, str(p), str(d), str(itl)]
    procs.start([*argv, "--bidirectional"] if bidirectional else argv, OTHER_CPUS)
    wait(f"http://127.0.0.1:{p}/health")
    wait(f"http://127.0.0.1:{d}/health")
    return f"http://127.0.0.1:{p}", f"http://127.0.0.1:{d}"


def frontend(procs: Procs, flow: str, prefill: str, decode: str, *extra: str) -> tuple[str, int]:
    port = free_port()
    proc = procs.start(
        [
            sys.executable,
            "-m",
            "disagg",
            "frontend",
            "--discovery",
            "static",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--admin-port",
            "0",
            "--flow",
            flow,
            "--prefill",
            f"{prefill},engine-id=prefill-0,side-channel-port=5600",
            "--decode",
            decode,
            *extra,
        ],
        PROXY_CPUS,
    )
    wait(f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}", proc.pid


def router(procs: Procs, prefill: str, decode: str) -> tuple[str, int]:
    python = subprocess.run([str(HERE / "env.sh")], check=True, capture_output=True, text=True).stdout.split()[-1]
    port = free_port()
    proc = procs.start(
        [
            str(Path(python).parent / "vllm-router"),
            "--vllm-pd-disaggregation",
            "--prefill",
            prefill,
            "--decode",
            decode,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--policy",
            "round_robin",
            "--prometheus-port",
            str(free_port()),
            "--log-level",
            "error",
        ],
        PROXY_CPUS,
    )
    wait(f"http://127.0.0.1:{port}/health", timeout=120)
    return f"http://127.0.0.1:{port}", proc.pid


# ---- load -------------------------------------------------------------------------------------------------------


async def one_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[float, float]:
    started = time.perf_counter()
    first = 0.0
    async with session.post(url, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {await r.text()}")
        async for _ in r.content.iter_any():
            if not first:
                first = time.perf_counter() - started
    return first, time.perf_counter() - started


async def direct_request(
    session: aiohttp.ClientSession, prefill: str, decode: str, body: dict[str, Any]
) -> tuple[float, float]:
    """The two legs as the frontend sends them, driven by the client itself."""
    started = time.perf_counter()
    rid = os.urandom(16).hex()
    headers = {"X-Request-Id": rid}
    kv = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    p_body = {**body, "stream": False, "max_tokens": 1, "kv_transfer_params": kv}
    async with session.post(prefill + "/v1/completions", json=p_body, headers=headers) as r:
        returned = (await r.json())["kv_transfer_params"]
    first = 0.0
    async with session.post(
        decode + "/v1/completions", json={**body, "kv_transfer_params": returned}, headers=headers
    ) as r:
        async for _ in r.content.iter_any():
            if not first:
                first = time.perf_counter() - started
    return first, time.perf_counter() - started


async def load(make: Any, concurrency: int, total: int) -> tuple[list[tuple[float, float]], float]:
    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    results: list[tuple[float, float]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        queue = iter(range(total))

        async def worker() -> None:
            for _ in queue:
                results.append(await make(session))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return results, elapsed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(results: list[tuple[float, float]]) -> dict[str, float]:
    ttft = [r[0] for r in results]
    total = [r[1] for r in results]
    return {
        "ttft_p50": pct(ttft, 0.5),
        "ttft_p99": pct(ttft, 0.99),
        "e2e_p50": pct(total, 0.5),
        "e2e_p99": pct(total, 0.99),
        "e2e_mean": statistics.fmean(total),
    }


def added_buckets(url: str) -> dict[float, float]:
    """Cumulative bucket counts of disagg_frontend_added_latency_seconds (upper bound -> count)."""
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("disagg_frontend_added_latency_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """histogram_quantile over the difference of two scrapes: linear inside the bucket, as Prometheus does."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process and its threads so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def latency(args: argparse.Namespace) -> dict[str, Any]:
    procs = Procs()
    try:
        prefill, decode = sims(procs, "nixl", args.itl)
        fe, _ = frontend(procs, "pull", prefill, decode)
        body = {"model": "sim", "prompt": PROMPT, "max_tokens": args.tokens, "stream": True}
        await load(lambda s: one_request(s, fe + "/v1/completions", body), 32, 256)  # warm-up
        out: dict[str, Any] = {}
        for round_ in range(args.rounds):
            direct, _ = await load(lambda s: direct_request(s, prefill, decode, body), args.concurrency, args.requests)
            before = added_buckets(fe)
            via, _ = await load(lambda s: one_request(s, fe + "/v1/completions", body), args.concurrency, args.requests)
            after = added_buckets(fe)
            added = {f"p{int(q * 100)}": bucket_quantile(before, after, q) for q in (0.5, 0.9, 0.99)}
            out[f"round{round_}"] = {"direct": summary(direct), "frontend": summary(via), "frontend_added": added}
        return out
    finally:
        procs.stop()


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    procs = Procs()
    try:
        prefill, decode = sims(procs, "nixl", 0.0)
        fe, fe_pid = frontend(procs, "pull", prefill, decode)
        vr, vr_pid = router(procs, prefill, decode)
        body = {"model": "sim", "prompt": PROMPT, "max_tokens": 8}
        out: dict[str, Any] = {}
        for name, url, pid in (("frontend", fe, fe_pid), ("vllm-router", vr, vr_pid)) * args.rounds:
            await load(lambda s, u=url: one_request(s, u + "/v1/completions", body), args.concurrency, 200)
            cpu_before = cpu_seconds(pid)
            results, elapsed = await load(
                lambda s, u=url: one_request(s, u + "/v1/completions", body), args.concurrency, args.throughput_requests
            )
            # CPU per request: what the proxy costs whatever the client side can send (the load generator and the
            # simulator share the other CPU and can be the limit for the faster proxy).
            cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / len(results)
            out.setdefault(name, []).append(
                {"req_per_s": len(results) / elapsed, "cpu_ms_per_request": cpu_ms, **summary(results)}
            )
        return out
    finally:
        procs.stop()


async def memory(args: argparse.Namespace) -> dict[str, Any]:
    procs = Procs()
    try:
        prefill, decode = sims(procs, "nixl", 0.0, bidirectional=True)
        fe, pid = frontend(procs, "bidirectional", prefill, decode, "--conversation-ttl", "5")
        samples = [{"requests": 0, "rss_kib": rss_kib(pid), "conversations": 0}]
        step = args.conversations // 10
        counter = iter(range(args.conversations))

        async def turn(session: aiohttp.ClientSession) -> tuple[float, float]:
            body = {"model": "sim", "prompt": PROMPT, "max_tokens": 2, "conversation_id": f"conv-{next(counter)}"}
            return await one_request(session, fe + "/v1/completions", body)

        started = time.perf_counter()
        for i in range(10):
            await load(turn, 64, step)
            with urllib.request.urlopen(fe + "/health") as r:
                health = json.loads(r.read())
            samples.append(
                {"requests": (i + 1) * step, "rss_kib": rss_kib(pid), "conversations": health["conversations"]}
            )
        return {"samples": samples, "seconds": time.perf_counter() - started}
    finally:
        procs.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--requests", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--itl", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--throughput-requests", type=int, default=4000)
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--only", choices=["latency", "throughput", "memory"])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=len(os.sched_getaffinity(0)) >= 2)
    args = parser.parse_args()
    if args.pin:
        global PROXY_CPUS, OTHER_CPUS
        cpus = sorted(os.sched_getaffinity(0))
        PROXY_CPUS, OTHER_CPUS = {cpus[0]}, set(cpus[1:])
        pin(OTHER_CPUS)  # the load generator itself
    results: dict[str, Any] = {"args": vars(args) | {"out": str(args.out)}}
    for name, fn in (("latency", latency), ("throughput", throughput), ("memory", memory)):
        if args.only in (None, name):
            results[name] = asyncio.run(fn(args))
            print(json.dumps({name: results[name]}, indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
