"""Request traces, generated deterministically from a seed, in the Mooncake JSONL format Dynamo replays.

Each line: {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}, one hash id per
512-token block; equal ids mean a shared prefix, which the simulated prefix cache and KV router exploit.
Standard library only, so the traces are the same whichever Python runs this.

Two sets, each workload two hours long:
- **tuning**: the five synthetic shapes the policy was developed on (steady, diurnal, bursty, agentic, mix_shift).
  Every constant of the policy is chosen on these.
- **held_out**: three realistic shapes built from the statistics of public traces, never looked at while tuning:
  on-off code-assistant traffic (Azure LLM inference trace 2023, code), drifting conversation traffic with sudden
  mix changes (the 2023 conversation trace), long-context agentic sessions with long shared prefixes (Mooncake's
  FAST'25 traces, scaled to the simulated engines' 16k context).
Request rates are sized for the simulated engines (sim.SLOWDOWN): peaks need 3-8 replicas of a pool.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

BLOCK = 512
HORIZON_S = 7200.0
MAX_CONTEXT = 15_000
"""Below the engines' max_model_len of 16384 with room for the output."""
SEEDS = (1, 2, 3)
WARMUP_SEED_OFFSET = 1000
"""The Dynamo Planner may warm its predictors on a trace: it gets the same workload from another seed, as a
service's previous day would be."""

Split = Literal["tuning", "held_out"]


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
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("".join(r.line() + "\n" for r in self.requests))
        tmp.replace(path)
        return path


class _Ids:
    """Fresh block hash ids; prefixes reuse ids on purpose."""

    def __init__(self) -> None:
        self.next = 1

    def take(self, count: int) -> tuple[int, ...]:
        ids = tuple(range(self.next, self.next + count))
        self.next += count
        return ids


def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(max(rng.lognormvariate(math.log(median), sigma), lo), hi))


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


def _independent(times: Iterator[float], isl: Callable[[float], int], osl: Callable[[float], int]) -> list[Request]:
    ids = _Ids()
    out = []
    for t in times:
        n = isl(t)
        out.append(Request(t, n, osl(t), ids.take(_blocks(n))))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tuning set: the five synthetic shapes


def steady(seed: int) -> Workload:
    rng = random.Random(seed)

    def rate(t: float) -> float:
        return 2.5

    requests = _independent(
        _poisson(rng, rate, 2.5, HORIZON_S),
        lambda t: _lognormal(rng, 2000, 0.6, 128, 12_000),
        lambda t: _lognormal(rng, 250, 0.7, 8, 1500),
    )
    return Workload("steady", "Poisson 2.5 req/s, ISL ~2k, OSL ~250 (lognormal)", requests, rate=rate)


def diurnal(seed: int) -> Workload:
    rng = random.Random(seed)

    def rate(t: float) -> float:
        # One compressed "day": trough 1 req/s at the start and end, peak 4 req/s (4:1) in the middle.
        return 2.5 - 1.5 * math.cos(2.0 * math.pi * t / HORIZON_S)

    requests = _independent(
        _poisson(rng, rate, 4.0, HORIZON_S),
        lambda t: _lognormal(rng, 2000, 0.6, 128, 12_000),
        lambda t: _lognormal(rng, 250, 0.7, 8, 1500),
    )
    return Workload("diurnal", "sinusoid 1 -> 4 -> 1 req/s (4:1) over 2 h", requests, rate=rate)


def bursty(seed: int) -> Workload:
    """Gamma renewal arrivals (CV 3, BurstGPT-style) with 4x spikes of 3-8 minutes at irregular gaps."""
    rng = random.Random(seed)
    spikes: list[tuple[float, float]] = []
    t = rng.uniform(300.0, 900.0)
    while t < HORIZON_S - 300.0:
        length = rng.uniform(180.0, 480.0)
        spikes.append((t, min(t + length, HORIZON_S)))
        t += length + 120.0 + rng.expovariate(1.0 / 600.0)
    base = 1.25

    def rate(at: float) -> float:
        return base * (4.0 if any(a <= at < b for a, b in spikes) else 1.0)

    times: list[float] = []
    t = 0.0
    while t < HORIZON_S:
        t += rng.gammavariate(1.0 / 9.0, 9.0 / rate(t))
        if t < HORIZON_S:
            times.append(t)
    requests = _independent(
        iter(times),
        lambda t: _lognormal(rng, 1500, 0.8, 64, 12_000),
        lambda t: _lognormal(rng, 150, 0.9, 4, 1500),
    )
    return Workload(
        "bursty",
        f"Gamma arrivals (CV 3) at {base:g} req/s with {len(spikes)} spikes to 4x of 3-8 min at irregular gaps",
        requests,
        steps_s=tuple(a for a, _ in spikes),
        rate=rate,
    )


def _sessions(
    rng: random.Random,
    session_rate: Callable[[float], float],
    peak_rate: float,
    prefixes: list[tuple[int, ...]],
    turns: tuple[int, int],
    new_tokens: tuple[float, float],
    output: tuple[float, float],
    think_s: tuple[float, float],
    ids: _Ids,
) -> list[Request]:
    """Multi-turn sessions: each turn resends the whole conversation after a shared system/tool prefix."""
    requests: list[Request] = []
    for start in _poisson(rng, session_rate, peak_rate, HORIZON_S):
        blocks = prefixes[min(int(rng.paretovariate(1.2)) - 1, len(prefixes) - 1)]
        context = len(blocks) * BLOCK
        at = start
        for _ in range(rng.randint(*turns)):
            new = _lognormal(rng, new_tokens[0], new_tokens[1], 16, 6000)
            if context + new > MAX_CONTEXT or at >= HORIZON_S:
                break
            context += new
            # The conversation so far keeps its block ids (a prefix shared with the previous turn); the new text
            # gets fresh ones, enough for every block the context now spans.
            blocks = blocks + ids.take(_blocks(context) - len(blocks))
            osl = _lognormal(rng, output[0], output[1], 8, 1500)
            requests.append(Request(at, context, osl, blocks))
            # The next turn comes after this answer streams (~30 ms/token) and a tool or user delay.
            at += osl * 0.03 + rng.uniform(*think_s)
            context += osl
    requests.sort(key=lambda r: r.at_s)
    return requests


def agentic(seed: int) -> Workload:
    rng = random.Random(seed)
    ids = _Ids()
    prefixes = [ids.take(_blocks(2048)) for _ in range(8)]
    requests = _sessions(rng, lambda t: 0.15, 0.15, prefixes, (5, 20), (600, 0.7), (180, 0.7), (1.0, 10.0), ids)
    return Workload(
        "agentic", "0.15 sessions/s of 5-20 turns, 8 shared 2k-token system prompts, context growing to 15k", requests
    )


def mix_shift(seed: int) -> Workload:
    """Alternating 30-minute phases: RAG-like (long prompt, short answer) and reasoning-like (the reverse)."""
    rng = random.Random(seed)
    phase_s = 1800.0

    def rag(t: float) -> bool:
        return int(t // phase_s) % 2 == 0

    def rate(t: float) -> float:
        return 1.25 if rag(t) else 1.5

    requests = _independent(
        _poisson(rng, rate, 1.5, HORIZON_S),
        lambda t: _lognormal(rng, 5000, 0.2, 2000, 9000) if rag(t) else _lognormal(rng, 500, 0.4, 64, 2000),
        lambda t: _lognormal(rng, 100, 0.4, 8, 400) if rag(t) else _lognormal(rng, 2000, 0.3, 400, 4000),
    )
    return Workload(
        "mix_shift",
        "30-min phases alternating RAG-like (ISL 5k, OSL 100, 1.25 req/s) and reasoning-like "
        "(ISL 500, OSL 2k, 1.5 req/s)",
        requests,
        steps_s=tuple(phase_s * k for k in (1, 2, 3)),
        rate=rate,
    )


# ---------------------------------------------------------------------------------------------------------------
# Held-out set: shapes of public traces


def code_onoff(seed: int) -> Workload:
    """Azure LLM inference trace 2023 (code), in shape: an on-off process (seconds to minutes of nothing, then a
    burst of tens of requests per second), prompts of tens to ~7.5k tokens (median ~1.5k), answers of a few to a
    few hundred tokens (median ~14). Bursts start within a second, so only capacity already running serves them.
    The burst intensity also drifts over the two hours."""
    rng = random.Random(seed)
    periods: list[tuple[float, float, float]] = []
    t = 0.0
    while t < HORIZON_S:
        t += _lognormal(rng, 35, 0.9, 3, 300)  # off
        length = float(_lognormal(rng, 45, 0.8, 5, 420))
        level = 0.75 + 0.5 * math.sin(2 * math.pi * t / HORIZON_S + rng.uniform(-0.3, 0.3))
        periods.append(
            (t, min(t + length, HORIZON_S), level * min(max(rng.lognormvariate(math.log(5.0), 0.45), 1.5), 15.0))
        )
        t += length
    times: list[float] = []
    for a, b, r in periods:
        s = a
        while True:
            s += rng.expovariate(r)
            if s >= b:
                break
            times.append(s)

    def rate(at: float) -> float:
        return next((r for a, b, r in periods if a <= at < b), 0.0)

    requests = _independent(
        iter(times), lambda t: _lognormal(rng, 1500, 1.0, 10, 7500), lambda t: _lognormal(rng, 14, 0.9, 3, 700)
    )
    return Workload(
        "code_onoff",
        "Azure-2023-code-shaped on-off bursts (1.5-15 req/s, off 3 s-5 min), ISL ~1.5k, OSL ~14",
        requests,
        rate=rate,
    )


CONVERSATION_CLASSES = ((200, 180), (400, 100), (1050, 400), (1300, 200), (4080, 60))
"""(prompt, answer) tokens of the request templates that dominate the Azure 2023 conversation trace; each request
varies around its template's lengths, and a tenth come from a broad distribution."""


def conversation(seed: int) -> Workload:
    """Azure LLM inference trace 2023 (conversation), in shape: a base rate drifting slowly (a random walk in log
    space), a mix of request templates whose weights drift and change suddenly every 10-40 minutes, and spikes of
    1-4 minutes to 2-3x at random times."""
    rng = random.Random(seed)
    step = 10.0
    level, log_base, weights = [], 0.0, [rng.random() for _ in CONVERSATION_CLASSES]
    mixes: list[list[float]] = []
    next_change = rng.uniform(600.0, 2400.0)
    spike_until, spike_factor = -1.0, 1.0
    for k in range(int(HORIZON_S / step) + 1):
        t = k * step
        log_base += rng.gauss(0.0, 0.04) - 0.002 * log_base
        if t >= next_change:
            weights = [rng.random() ** 2 for _ in CONVERSATION_CLASSES]
            next_change = t + rng.uniform(600.0, 2400.0)
        else:
            weights = [max(w * math.exp(rng.gauss(0.0, 0.03)), 1e-3) for w in weights]
        if t >= spike_until and rng.random() < step / 900.0:
            spike_until, spike_factor = t + rng.uniform(60.0, 240.0), rng.uniform(2.0, 3.0)
        level.append(1.5 * math.exp(log_base) * (spike_factor if t < spike_until else 1.0))
        total = sum(weights)
        mixes.append([w / total for w in weights])

    def rate(t: float) -> float:
        return level[min(int(t // step), len(level) - 1)]

    def pick(t: float) -> tuple[int, int]:
        mix = mixes[min(int(t // step), len(mixes) - 1)]
        if rng.random() < 0.1:
            return _lognormal(rng, 900, 1.0, 8, 12_000), _lognormal(rng, 150, 0.9, 4, 1500)
        isl, osl = rng.choices(CONVERSATION_CLASSES, weights=mix)[0]
        return _lognormal(rng, isl, 0.08, 8, 12_000), _lognormal(rng, osl, 0.35, 4, 1500)

    peak = max(level)
    ids = _Ids()
    requests = []
    for t in _poisson(rng, rate, peak, HORIZON_S):
        isl, osl = pick(t)
        requests.append(Request(t, isl, osl, ids.take(_blocks(isl))))
    return Workload(
        "conversation",
        "Azure-2023-conversation-shaped: drifting base ~1.5 req/s, template mix changing every 10-40 min, "
        "1-4 min spikes",
        requests,
        rate=rate,
    )


def agentic_long(seed: int) -> Workload:
    """Mooncake (FAST'25) conversation/tool traces, in shape: long-context sessions behind long shared prefixes
    (tool schemas and repository context, 4-10k tokens, a few hot ones reused by most sessions), many turns, and a
    session rate that ramps over the two hours. Scaled to the simulated engines' 16k context (Mooncake's prompts run
    to 20-66k tokens)."""
    rng = random.Random(seed)
    ids = _Ids()
    prefixes = [ids.take(_blocks(rng.randint(4000, 10_000))) for _ in range(12)]

    def session_rate(t: float) -> float:
        return 0.045 + 0.075 * math.sin(math.pi * t / HORIZON_S) ** 2

    requests = _sessions(rng, session_rate, 0.12, prefixes, (8, 30), (500, 0.9), (250, 0.8), (2.0, 20.0), ids)
    return Workload(
        "agentic_long",
        "0.045-0.12 sessions/s of 8-30 turns behind 12 shared 4-10k-token prefixes, contexts to 15k",
        requests,
    )


FAMILIES: dict[str, tuple[Split, Callable[[int], Workload]]] = {
    "steady": ("tuning", steady),
    "diurnal": ("tuning", diurnal),
    "bursty": ("tuning", bursty),
    "agentic": ("tuning", agentic),
    "mix_shift": ("tuning", mix_shift),
    "code_onoff": ("held_out", code_onoff),
    "conversation": ("held_out", conversation),
    "agentic_long": ("held_out", agentic_long),
}


def names(split: str = "all") -> list[str]:
    return [name for name, (s, _) in FAMILIES.items() if split in ("all", s)]


def make(name: str, seed: int) -> Workload:
    return FAMILIES[name][1](seed)
