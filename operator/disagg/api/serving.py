"""`spec.serving`: the check that the P/D path really serves, what the operator does when it does not, and how a
rollout that changes what both pools must agree on is paced (docs/decisions.md, D100-D109)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .types import Duration

CheckMode = Literal["Enforce", "Report", "Off"]
RemediationAction = Literal["Recreate", "Drain", "Report"]
StuckPolicy = Literal["Wait", "Rollback"]


class ServingCheck(ApiModel):
    """A tiny request through the frontend for every prefill/decode pair it may choose, on a period."""

    mode: CheckMode | None = Field(
        default=None,
        description="Enforce: Ready requires Serving, engine pods become ready only once their pairs serve, and "
        "rollouts are paced by it. Report: the Serving condition is reported but gates nothing. Off: no check "
        "(Serving is Unknown). Unset: the operator's --serving-check default (Enforce unless its administrator "
        "chose otherwise).",
    )
    interval: Duration = Field(default="10s", description="Time between two check rounds (at least 1s).")
    deadline: Duration = Field(
        default="10s",
        description="How long one round may take (1s to 60s); a pair that has not answered by then fails.",
    )
    failure_threshold: Annotated[int, Field(ge=1, le=10)] = Field(
        default=2,
        description="Consecutive failed rounds before a pair counts as failing (a failed round is re-checked "
        "after 2 s, not a whole interval).",
    )
    max_pairs: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=64,
        description="Most pairs probed per round. Larger deployments are sampled: every round probes the pairs of "
        "new or restarted engines first, then rotates through the rest, so each pair is probed within "
        "ceil(pairs / maxPairs) rounds.",
    )


class Remediation(ApiModel):
    """What the operator does when pairs fail (only with the operator's frontend, which can probe pairs)."""

    action: RemediationAction = Field(
        default="Recreate",
        description="Recreate: when every pair through an engine fails, delete the pod of the one that (re)started "
        "most recently (its workload recreates it with a new name, so peers holding stale transfer state about it "
        "handshake afresh); other failing pairs are drained in the frontend. Drain: only drain failing pairs. "
        "Report: do neither; an event says what would have been done.",
    )
    cooldown: Duration = Field(
        default="2m",
        description="At most one pod restart per cooldown per DisaggDeployment, and none while a pool is short of "
        "ready replicas for another reason (at least 10s).",
    )
    drain_for: Duration = Field(
        default="5m",
        description="Lifetime of a drain (at least the check interval); renewed while the pair keeps failing, lifted "
        "when it serves.",
    )


class DeploymentRollout(ApiModel):
    """A rollout that changes the pairing revision (what both pools must agree on) rolls both pools together."""

    progress_deadline: Duration = Field(
        default="15m",
        description="A rollout whose new pods have not passed their pair probes by then is RolloutStuck (Degraded); "
        "the old revision keeps serving. At least 1m and the check interval.",
    )
    on_stuck: StuckPolicy = Field(
        default="Wait",
        description="Wait: keep the new revision trying, old pods serve. Rollback: put the previous pod templates "
        "back (the spec stays as written; the rollback holds until the spec changes again).",
    )


class ServingSpec(ApiModel):
    """End-to-end health of the P/D path and what follows from it."""

    check: ServingCheck = Field(default_factory=ServingCheck, description="The serving check.")
    remediation: Remediation = Field(default_factory=Remediation, description="Recovery from failing pairs.")
    rollout: DeploymentRollout = Field(
        default_factory=DeploymentRollout, description="Pacing of rollouts that change the pairing revision."
    )
