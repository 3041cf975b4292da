"""`status`: what the operator reports. Written only by the operator, so reading it is lenient."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Phase = Literal["Pending", "Progressing", "Ready", "Degraded", "Invalid"]
ConditionType = Literal["Ready", "Serving", "Progressing", "Degraded", "SpecValid", "ScalingActive"]


class StatusModel(BaseModel):
    """Status is read back from the cluster, where an older operator may have left other keys: ignore them."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
        frozen=True,
    )


class Condition(StatusModel):
    """A Kubernetes-style condition."""

    type: str = Field(description="Condition type: Ready, Serving, Progressing, Degraded, SpecValid or ScalingActive.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="One-word CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(default=None, description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation this condition was computed from."
    )


class PoolStatus(StatusModel):
    replicas: int = Field(default=0, description="Replicas that exist (pods of the current and older revisions).")
    ready_replicas: int = Field(default=0, description="Replicas whose pods are all ready.")
    updated_replicas: int = Field(default=0, description="Replicas running the current revision.")
    desired_replicas: int = Field(default=0, description="Replicas the pool should have now (spec or autoscaler).")
    last_scale_time: str | None = Field(default=None, description="When the autoscaler last changed the replicas.")
    last_scale_reason: str | None = Field(default=None, description="Why the autoscaler last changed the replicas.")
    serving_replicas: int | None = Field(
        default=None,
        description="Ready engines of the pool with at least one pair that passed the last serving check "
        "(absent when the check does not probe pairs).",
    )


class ComponentStatus(StatusModel):
    replicas: int = Field(default=0, description="Pods that exist.")
    ready_replicas: int = Field(default=0, description="Pods that are ready.")
    ready: bool = Field(default=False, description="Whether the component can serve.")


class FailingPair(StatusModel):
    prefill: str = Field(default="", description="Prefill pod.")
    decode: str = Field(default="", description="Decode pod.")
    revision: str = Field(default="", description="Their pairing revision.")
    since: str | None = Field(default=None, description="When the pair started failing (RFC 3339).")
    error: str = Field(default="", description="What the last probe of the pair answered.")
    drained: bool = Field(default=False, description="Whether the frontend was told to take it out of rotation.")


class Remediation(StatusModel):
    time: str | None = Field(default=None, description="When it was done (RFC 3339).")
    action: str = Field(default="", description="RecreatedEngine, DrainedPairs, or Held (report only / rate limit).")
    target: str = Field(default="", description="The pod or pairs acted on.")
    reason: str = Field(default="", description="Why.")


class Replacements(StatusModel):
    """What the replacement cooldown is computed from, kept here so that a new leader honours it."""

    last_replacement_time: str | None = Field(
        default=None, description="When the operator last recreated an engine pod to restore serving (RFC 3339)."
    )
    unrecovered: int = Field(
        default=0,
        description="Replacements since Serving was last True; each one doubles the cooldown (up to an hour).",
    )


class ServingStatus(StatusModel):
    """The last serving check."""

    mode: str | None = Field(default=None, description="Enforce, Report or Off (as applied).")
    method: str | None = Field(
        default=None,
        description="pairs: every pair probed through the operator's frontend; endpoint: one request through the "
        "endpoint (vllm-router or a custom router cannot probe pairs).",
    )
    last_check_time: str | None = Field(default=None, description="When the last round finished (RFC 3339).")
    pairs: int = Field(default=0, description="Pairs the frontend may choose.")
    probed: int = Field(default=0, description="Pairs probed in the last round.")
    passing: int = Field(default=0, description="Probed pairs that answered within the deadline.")
    failing: int = Field(default=0, description="Pairs that failed failureThreshold rounds in a row.")
    drained: int = Field(default=0, description="Failing pairs the frontend was told to skip.")
    slowest_seconds: float | None = Field(default=None, description="Slowest passing probe of the last round.")
    failing_pairs: list[FailingPair] = Field(default_factory=list, description="Up to 10 failing pairs.")
    last_remediation: Remediation | None = Field(default=None, description="The last recovery action.")
    replacements: Replacements | None = Field(
        default=None, description="The pod-replacement rate limit's state (spec.serving.remediation.cooldown)."
    )


class RevisionCount(StatusModel):
    revision: str = Field(default="", description="Pairing revision (disagg.dev/pairing-revision).")
    prefill: int = Field(default=0, description="Ready prefill engines of the revision.")
    decode: int = Field(default=0, description="Ready decode engines of the revision.")
    waiting_prefill: int = Field(default=0, description="Prefill engines up but not yet admitted (probing).")
    waiting_decode: int = Field(default=0, description="Decode engines up but not yet admitted (probing).")


class RolloutStatus(StatusModel):
    """Where a rollout of the pairing revision stands."""

    revision: str = Field(default="", description="The pairing revision the spec asks for.")
    state: str = Field(default="", description="Complete, RollingOut, Stuck or RolledBack.")
    started_time: str | None = Field(default=None, description="When pods of this revision first appeared.")
    revisions: list[RevisionCount] = Field(default_factory=list, description="Live revisions, newest first.")
    waiting_for: str = Field(default="", description="What the rollout waits for.")
    rolled_back_generation: int | None = Field(
        default=None, description="With onStuck Rollback: the spec generation whose rollout was rolled back."
    )
    rolled_back_to: str | None = Field(
        default=None, description="The pairing revision the pools were rolled back to (while that spec stands)."
    )


class DisaggDeploymentStatus(StatusModel):
    """Observed state of a DisaggDeployment."""

    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation the operator last acted on."
    )
    phase: Phase | None = Field(default=None, description="Summary: Pending, Progressing, Ready, Degraded or Invalid.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Serving, Progressing, Degraded, SpecValid and ScalingActive conditions.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    endpoint: str | None = Field(
        default=None, description="In-cluster URL of the OpenAI-compatible API (the Service <name>)."
    )
    model_family: str | None = Field(
        default=None, description="Model family the operator applied (spec.model.family, or the inferred one)."
    )
    prefill_ready: str | None = Field(default=None, description="Ready/desired prefill replicas, e.g. 2/3.")
    decode_ready: str | None = Field(default=None, description="Ready/desired decode replicas, e.g. 1/1.")
    prefill: PoolStatus | None = Field(default=None, description="Prefill pool.")
    decode: PoolStatus | None = Field(default=None, description="Decode pool.")
    router: ComponentStatus | None = Field(default=None, description="The router.")
    render: ComponentStatus | None = Field(default=None, description="The render tier, when enabled.")
    kv_store: ComponentStatus | None = Field(default=None, description="The KV store, when deployed.")
    serving: ServingStatus | None = Field(default=None, description="The last serving check.")
    rollout: RolloutStatus | None = Field(default=None, description="Pairing revisions and the rollout between them.")
    kv_node: ComponentStatus | None = Field(
        default=None,
        description="The per-node KV daemons (standalone Mooncake client, PegaFlow server), when deployed.",
    )
    pairing_revision: str | None = Field(
        default=None,
        description="Pairing revision of the engines the spec asks for: a hash of what prefill and decode must "
        "agree on (images, model, connector settings, KV dtype, block size, speculative method). Engine pods carry "
        "it as the label disagg.dev/pairing-revision, and the frontend only pairs engines of one revision.",
    )
    pairing_generation: int | None = Field(
        default=None, description="The metadata.generation that introduced pairingRevision (orders revisions)."
    )
    scaler_state: str | None = Field(
        default=None,
        description="What the operator's autoscaler has learned (versioned JSON, not an API): whichever operator "
        "replica reconciles next continues from it.",
    )
    applied_digest: str | None = Field(
        default=None,
        description="A digest of what the operator last applied to the children and of the versions those applies "
        "returned (not an API): a replica taking over applies again only the children that are no longer so.",
    )
