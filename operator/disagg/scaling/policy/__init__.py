"""The pure scaling policy: metrics snapshots + config + previous state -> desired replicas per pool.

No I/O, no clock, no randomness: time comes in as `now`, everything the policy remembers goes out in the returned
`PolicyState` and comes back on the next call. docs/autoscaling.md derives the control law; in short:

* prefill is sized so the queue in front of it keeps TTFT p90 under target: per-replica capacity C (tokens/s,
  measured), a target utilisation rho*(n) from a G/G/n waiting-time tail with a learned burstiness factor k,
  N_p = lambda_tokens / (rho* C), never at or below a count found too small, and at least enough to clear a
  clump of arrivals (sized by their measured dispersion) within the target;
* decode by Little's law on generated tokens: ITL p90 = a + b*KV usage + c*batch/maxNumSeqs fitted online (a
  fixed, a per-KV-token and a per-sequence cost), the batch per replica where that meets the ITL target, and
  N_d = tokens/s * ITL* / batch with square-root headroom;
* a proportional feedback path adds replicas at once when the SLO is already broken with a real queue, except
  while replicas start, right after capacity changed, or while the queue is draining;
* up fast (step-limited); down only after a stabilisation window, within a tolerance band, if the survivors can
  absorb the load and the need is not climbing; after a burst (caught short) the window is held 3x longer;
  min/max per pool, P:D ratio bounds and the GPU budget last.

One module per stage, in the order data flows through `decide`: `config` (spec -> PolicyConfig, once), `state`,
`proposal` (holds and feedback), `prefill` and `decode` (the models), `limits` (stabilisation and constraints),
`decide` (the entry point and its output).
"""

from .config import DEFAULT_TUNING, POOLS, PolicyConfig, PoolLimits, Tuning, config_from_spec
from .decide import Decision, PoolDecision, ScalingCondition, decide
from .proposal import HoldReason
from .state import ItlFit, PolicyState, PoolMemory, Recommendation

__all__ = [
    "DEFAULT_TUNING",
    "POOLS",
    "Decision",
    "HoldReason",
    "ItlFit",
    "PolicyConfig",
    "PolicyState",
    "PoolDecision",
    "PoolLimits",
    "PoolMemory",
    "Recommendation",
    "ScalingCondition",
    "Tuning",
    "config_from_spec",
    "decide",
]
