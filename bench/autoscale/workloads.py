"""Synthetic request traces, generated deterministically from a seed, in the Mooncake JSONL format Dynamo replays.

Each line: {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}, one hash id per
512-token block; equal ids mean a shared prefix, which the simulated prefix cache and KV router exploit.
Standard library only, so the traces are the same whichever Python runs this.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 512
MINUTES = 30.0
MAX_CONTEXT = 15_000
"""Below the engines' max_model_len of 16384 with room for the output."""


@dataclass(frozen=True)
class Request:
    at_s: float
    isl: int
    osl: int
    blocks: tuple[int, ...]

    def line(self) -> str:
        return json.dumps(
            {
                "timestamp": round(self.at_s * 1000.0),
                "input_length": self.isl,
                "output_length": self.osl,
                "hash_ids": list(self.blocks),
            }
        )


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    requests: list[Request]
    steps_s: tuple[float, ...] = ()
    """Times of sudden load increases, for the reaction-time metric."""
    rate: Callable[[float], float] | None = field(default=None, repr=False)
    """The intended arrival rate (req/s) at a time, for plots."""

    def write(self, path: Path) -> Path:
        path.write_text("".join(r.line() + "\n" for r in self.requests))
        return path


class _Ids:
    """Fresh block hash ids; prefixes reuse ids on purpose."""

    def __init__(self) -> None:
        self.next = 1

    def take(self, count: int) -> tuple[int, ...]:
        ids = tuple(range(self.next, self.next + count))
        self.next += count
        return ids


def _lognormal(rng: random.Random, mean: float, sigma: float, lo: int, hi: int) -> int:
    mu = math.log(mean) - sigma * sigma / 2.0
    return int(min(max(rng.lognormvariate(mu, sigma), lo), hi))


def _blocks(tokens: int) -> int:
    return max(1, math.ceil(tokens / BLOCK))


def _poisson(rng: random.Random, rate: Callable[[float], float], peak: float, horizon_s: float) -> Iterator[float]:
    """Non-homogeneous Poisson arrivals by thinning."""
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= horizon_s:
            return
        if rng.random() * peak <= rate(t):
            yield t


def _independent(rng: random.Random, times: Iterator[float], isl: Callable[[float], int], osl: Callable[[float], int]):
    ids = _Ids()
    out = []
    for t in times:
        n = isl(t)
        out.append(Request(t, n, osl(t), ids.take(_blocks(n))))
    return out


def steady(seed: int) -> Workload:
    rng = random.Random(seed)
    horizon = MINUTES * 60

    def rate(t: float) -> float:
        return 24.0

    requests = _independent(
        rng,
        _poisson(rng, rate, 24.0, horizon),
        lambda t: _lognormal(rng, 2500, 0.6, 128, 12_000),
        lambda t: _lognormal(rng, 250, 0.7, 8, 1500),
    )
    return Workload("steady", "Poisson 24 req/s, ISL ~2.5k, OSL ~250 (lognormal)", requests, rate=rate)


def diurnal(seed: int) -> Workload:
    rng = random.Random(seed)
    horizon = MINUTES * 60

    def rate(t: float) -> float:
        # One compressed "day": trough 8 req/s at the start and end, peak 32 req/s (4:1) in the middle.
        return 20.0 - 12.0 * math.cos(2.0 * math.pi * t / horizon)

    requests = _independent(
        rng,
        _poisson(rng, rate, 32.0, horizon),
        lambda t: _lognormal(rng, 2500, 0.6, 128, 12_000),
        lambda t: _lognormal(rng, 250, 0.7, 8, 1500),
    )
    return Workload("diurnal", "sinusoid 8 -> 32 -> 8 req/s (4:1) over 30 min", requests, rate=rate)


def bursty(seed: int) -> Workload:
    rng = random.Random(seed)
    horizon = MINUTES * 60
    spikes = ((420.0, 720.0), (1260.0, 1560.0))
    base = 10.0

    def rate(t: float) -> float:
        return base * (4.0 if any(a <= t < b for a, b in spikes) else 1.0)

    # Gamma renewal process with coefficient of variation 3 (BurstGPT-style): shape 1/9, scaled to the rate.
    times: list[float] = []
    t = 0.0
    while t < horizon:
        r = rate(t)
        t += rng.gammavariate(1.0 / 9.0, 9.0 / r)
        if t < horizon:
            times.append(t)
    requests = _independent(
        rng,
        iter(times),
        lambda t: _lognormal(rng, 2000, 0.8, 64, 12_000),
        lambda t: _lognormal(rng, 200, 0.9, 4, 1500),
    )
    return Workload(
        "bursty",
        "Gamma arrivals (CV 3) at 10 req/s with two 5-minute 4x spikes (40 req/s)",
        requests,
        steps_s=tuple(a for a, _ in spikes),
        rate=rate,
    )


def agentic(seed: int) -> Workload:
    """Multi-turn sessions: each turn resends the whole conversation, and sessions share 8 system prompts."""
    rng = random.Random(seed)
    horizon = MINUTES * 60
    ids = _Ids()
    groups = [ids.take(_blocks(2048)) for _ in range(8)]
    session_rate = 1.4
    requests: list[Request] = []
    t = 0.0
    while True:
        t += rng.expovariate(session_rate)
        if t >= horizon:
            break
        blocks = groups[rng.randrange(len(groups))]
        context = len(blocks) * BLOCK
        at = t
        for _ in range(rng.randint(5, 20)):
            new = _lognormal(rng, 600, 0.7, 32, 4000)
            if context + new > MAX_CONTEXT or at >= horizon:
                break
            context += new
            # The conversation so far keeps its block ids (a shared prefix with the previous turn); the new text
            # gets fresh ones, enough for every block the context now spans.
            blocks = blocks + ids.take(_blocks(context) - len(blocks))
            osl = _lognormal(rng, 180, 0.7, 8, 1000)
            requests.append(Request(at, context, osl, blocks))
            # The next turn comes after this answer streams (~20 ms/token) and a tool or user delay of 1-10 s.
            at += osl * 0.02 + rng.uniform(1.0, 10.0)
            context += osl
    requests.sort(key=lambda r: r.at_s)
    return Workload(
        "agentic",
        "1.4 sessions/s of 5-20 turns, 8 shared 2k-token system prompts, context growing to 15k",
        requests,
    )


def mix_shift(seed: int) -> Workload:
    rng = random.Random(seed)
    horizon = MINUTES * 60
    switch = horizon / 2

    def rate(t: float) -> float:
        return 7.0 if t < switch else 9.0

    requests = _independent(
        rng,
        _poisson(rng, rate, 9.0, horizon),
        lambda t: _lognormal(rng, 8000, 0.25, 2000, 14_000) if t < switch else _lognormal(rng, 500, 0.4, 64, 2000),
        lambda t: _lognormal(rng, 100, 0.4, 8, 400) if t < switch else _lognormal(rng, 2000, 0.3, 400, 4000),
    )
    return Workload(
        "mix_shift",
        "15 min RAG-like (ISL 8k, OSL 100, 7 req/s) then 15 min reasoning-like (ISL 500, OSL 2k, 9 req/s)",
        requests,
        steps_s=(switch,),
        rate=rate,
    )


ALL: dict[str, Callable[[int], Workload]] = {
    "steady": steady,
    "diurnal": diurnal,
    "bursty": bursty,
    "agentic": agentic,
    "mix_shift": mix_shift,
}
