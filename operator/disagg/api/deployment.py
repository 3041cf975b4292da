"""The DisaggDeployment resource: metadata, spec and status."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from disagg.names import CHILD_NAME_SUFFIXES

from .base import ApiModel
from .cel import CelRule
from .engine import EngineSpec
from .errors import rule_error
from .frontend import FrontendSpec
from .kvcache import KvCacheSpec
from .model import ModelSpec
from .pool import PoolSpec
from .scaling import ScalingSpec
from .serving import ServingSpec
from .status import DisaggDeploymentStatus
from .transfer import TransferSpec
from .types import Annotations, Labels

MAX_NAME_LENGTH = 40
"""Children are named <name>-prefill etc., and LeaderWorkerSet pods add replica and worker indices and a
revision hash to label values capped at 63 characters, so the resource name itself must stay short."""
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
RESERVED_SUFFIX_PATTERN = f"({'|'.join(CHILD_NAME_SUFFIXES)})$"
"""Names ending like a child's (D71): `x-router` would be the router Service of `x`."""


def _check_name(name: str) -> str:
    suffix = next((suffix for suffix in CHILD_NAME_SUFFIXES if name.endswith(suffix)), None)
    if suffix is not None:
        owner = name.removesuffix(suffix)
        raise rule_error(
            f"{name!r} ends with {suffix}, so it is the name of a child of a DisaggDeployment named {owner!r} and "
            "two DisaggDeployments in the namespace could fight over one object",
            f"choose a name that does not end with {', '.join(CHILD_NAME_SUFFIXES)}",
        )
    return name


_ACTIVE_OPERATOR_SCALING = "self.{pool}.autoscaling.enabled && self.{pool}.autoscaling.controller == 'operator'"

SPEC_CEL_RULES = (
    CelRule(
        rule="self.prefill.tensorParallel % self.decode.tensorParallel == 0 || "
        "self.decode.tensorParallel % self.prefill.tensorParallel == 0",
        message="heterogeneous TP needs the larger tensorParallel to be a multiple of the smaller one: change "
        "spec.prefill.tensorParallel or spec.decode.tensorParallel",
        field_path=".decode.tensorParallel",
    ),
    CelRule(
        rule="!(self.transfer.connector == 'nixl-push' && self.decode.decodeContextParallel > 1)",
        message="connector nixl-push does not support decode context parallelism: set "
        "spec.decode.decodeContextParallel to 1 or use connector nixl",
        field_path=".decode.decodeContextParallel",
    ),
    CelRule(
        rule="!(self.transfer.connector == 'nixl-push' && self.decode.pipelineParallel > 1)",
        message="connector nixl-push does not support pipeline parallelism on decode: set "
        "spec.decode.pipelineParallel to 1 or use connector nixl",
        field_path=".decode.pipelineParallel",
    ),
    CelRule(
        rule="self.decode.prefillContextParallel == 1",
        message="prefill context parallelism only applies to the prefill pool: set "
        "spec.decode.prefillContextParallel to 1",
        field_path=".decode.prefillContextParallel",
    ),
    CelRule(
        rule="!has(self.prefill.customContainer)",
        message="spec.prefill.customContainer is not supported: the prefill pool always runs vLLM; remove it",
        field_path=".prefill.customContainer",
    ),
    CelRule(
        rule="!has(self.decode.customContainer) || self.transfer.connector == 'custom'",
        message="spec.decode.customContainer needs a plugin connector: set spec.transfer.connector to custom with "
        "spec.transfer.custom, or remove customContainer",
        field_path=".decode.customContainer",
    ),
    CelRule(
        rule="!has(self.decode.customContainer) || self.decode.nodesPerReplica == 1",
        message="a custom decode container runs as one pod per replica: set spec.decode.nodesPerReplica to 1",
        field_path=".decode.nodesPerReplica",
    ),
    CelRule(
        rule="!(self.transfer.connector == 'lmcache' && has(self.kvCache.store) && self.kvCache.store.type == "
        "'mooncake')",
        message="connector lmcache needs its LMCache server, and a DisaggDeployment runs one KV-store daemon: use "
        "spec.kvCache.store.type lmcache, no store, or another connector",
        field_path=".kvCache.store.type",
    ),
    CelRule(
        rule="!(self.model.family == 'dense' && (self.prefill.expertParallel || self.decode.expertParallel))",
        message="expertParallel needs a mixture-of-experts model but spec.model.family is dense: set family to moe "
        "(or mla/auto), or turn expertParallel off",
        field_path=".model.family",
    ),
    CelRule(
        rule="!(self.frontend.router.implementation == 'vllm-router' && !has(self.frontend.router.customContainer) "
        "&& (self.transfer.connector == 'nixl-push' || (self.transfer.connector == 'nixl' && has(self.transfer.nixl) "
        "&& self.transfer.nixl.bidirectional.enabled) || (self.transfer.connector == 'moriio' && "
        "(!has(self.transfer.moriio) || self.transfer.moriio.mode == 'write')) || self.frontend.render.enabled))",
        message="vllm-router 0.1.17 cannot drive NIXL push, bidirectional multi-turn, MoRI-IO write or the render "
        "tier: remove spec.frontend.router.implementation (the operator's frontend, disagg-frontend, drives them)",
        field_path=".frontend.router.implementation",
    ),
    CelRule(
        rule="!(self.model.family == 'hybrid-ssm' && self.transfer.connector == 'lmcache')",
        message="hybrid SSM models need the hybrid KV cache manager, which LMCache does not support: use connector "
        "nixl, mooncake or moriio",
        field_path=".transfer.connector",
    ),
    *(
        CelRule(
            rule=f"!({_ACTIVE_OPERATOR_SCALING.format(pool=pool)}) || has(self.{pool}.autoscaling.maxReplicas)",
            message=f"spec.{pool}.autoscaling.maxReplicas is required when the operator scales the pool: set it",
            field_path=f".{pool}.autoscaling.maxReplicas",
        )
        for pool in ("prefill", "decode")
    ),
    CelRule(
        rule=f"!({_ACTIVE_OPERATOR_SCALING.format(pool='prefill')}) || has(self.scaling.slo.ttftP90)",
        message="spec.scaling.slo.ttftP90 is required to scale the prefill pool: set a TTFT target such as 2s",
        field_path=".scaling.slo.ttftP90",
    ),
    CelRule(
        rule=f"!({_ACTIVE_OPERATOR_SCALING.format(pool='decode')}) || has(self.scaling.slo.itlP90)",
        message="spec.scaling.slo.itlP90 is required to scale the decode pool: set an ITL target such as 50ms",
        field_path=".scaling.slo.itlP90",
    ),
)


class ObjectMeta(ApiModel):
    """The subset of Kubernetes ObjectMeta a DisaggDeployment file may carry; server-set fields pass through."""

    model_config = ConfigDict(strict=False)

    name: Annotated[
        str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN), AfterValidator(_check_name)
    ] = Field(description="Name; children are named after it.")
    namespace: Annotated[str, Field(min_length=1, max_length=63)] | None = Field(default=None, description="Namespace.")
    labels: Labels = Field(default_factory=dict, description="Labels.")
    annotations: Annotations = Field(default_factory=dict, description="Annotations.")
    generate_name: str | None = Field(default=None, description="Not supported: give a name.")
    uid: str | None = Field(default=None, description="Set by the server.")
    resource_version: str | None = Field(default=None, description="Set by the server.")
    generation: int | None = Field(default=None, description="Set by the server.")
    creation_timestamp: Any = Field(default=None, description="Set by the server.")
    deletion_timestamp: Any = Field(default=None, description="Set by the server.")
    deletion_grace_period_seconds: int | None = Field(default=None, description="Set by the server.")
    self_link: str | None = Field(default=None, description="Set by the server.")
    finalizers: list[str] = Field(default_factory=list, description="Finalizers.")
    owner_references: list[dict[str, Any]] = Field(default_factory=list, description="Owner references.")
    managed_fields: list[dict[str, Any]] = Field(default_factory=list, description="Set by the server.")


class DisaggDeploymentSpec(ApiModel):
    """One model served by a prefill pool and a decode pool behind a P/D-aware router."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [rule.as_schema() for rule in SPEC_CEL_RULES]}
    )

    model: ModelSpec = Field(description="The served model and where its weights come from.")
    engine: EngineSpec = Field(
        default_factory=EngineSpec, description="vLLM settings shared by both pools (each pool may override)."
    )
    transfer: TransferSpec = Field(
        default_factory=TransferSpec, description="How KV cache moves from prefill to decode. Default: NIXL pull."
    )
    kv_cache: KvCacheSpec = Field(
        default_factory=KvCacheSpec, description="KV cache tiers beyond GPU memory. Default: none."
    )
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="The prefill pool.")
    decode: PoolSpec = Field(default_factory=PoolSpec, description="The decode pool.")
    frontend: FrontendSpec = Field(
        default_factory=FrontendSpec, description="Router, optional render tier and the user-facing Service."
    )
    scaling: ScalingSpec = Field(
        default_factory=ScalingSpec, description="SLO targets and limits for pools with autoscaling enabled."
    )
    serving: ServingSpec = Field(
        default_factory=ServingSpec,
        description="The check that requests really go prefill -> KV transfer -> decode, recovery from failing "
        "pairs, and the pacing of rollouts that change what both pools must agree on.",
    )


class DisaggDeployment(ApiModel):
    """A DisaggDeployment: the whole resource as stored in the cluster."""

    api_version: Literal["disagg.dev/v1alpha1"] = Field(description="disagg.dev/v1alpha1")
    kind: Literal["DisaggDeployment"] = Field(description="DisaggDeployment")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: DisaggDeploymentSpec = Field(description="Desired state.")
    status: DisaggDeploymentStatus | None = Field(default=None, description="Observed state, written by the operator.")
