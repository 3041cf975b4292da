"""`spec.frontend`: the P/D-aware router, the optional GPU-less render tier, and the user-facing Service."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .pool import CustomContainer
from .types import Annotations, ArgList, EnvList, Image, Labels, Port, ResourceList, Toleration

DEFAULT_ROUTER_IMAGE = "ghcr.io/disagg-dev/vllm-router:0.1.17"
RouterImplementation = Literal["disagg-frontend", "vllm-router"]
RouterPolicy = Literal[
    "random",
    "round_robin",
    "least_loaded",
    "cache_aware",
    "kv_aware",
    "power_of_two",
    "consistent_hash",
    "sticky_least_loaded",
]
FRONTEND_POLICIES: tuple[RouterPolicy, ...] = ("round_robin", "least_loaded", "consistent_hash")
"""How the operator's frontend chooses engines (`disagg frontend --prefill-policy/--decode-policy`)."""
VLLM_ROUTER_POLICIES: tuple[RouterPolicy, ...] = (
    "random",
    "round_robin",
    "cache_aware",
    "kv_aware",
    "power_of_two",
    "consistent_hash",
    "sticky_least_loaded",
)
"""vllm-router 0.1.17's --policy choices."""


class ResourceRequirements(ApiModel):
    requests: ResourceList = Field(default_factory=dict, description="Resource requests, e.g. {cpu: 1, memory: 1Gi}.")
    limits: ResourceList = Field(default_factory=dict, description="Resource limits.")


class PodPlacement(ApiModel):
    node_selector: Labels = Field(default_factory=dict, description="Node labels the pods require.")
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = Field(
        default_factory=list, description="Taints the pods tolerate."
    )


class RouterSpec(ApiModel):
    """The P/D router in front of the engines: the operator's own frontend (default) or vllm-router, both
    discovering engine pods through the Kubernetes API."""

    implementation: RouterImplementation = Field(
        default="disagg-frontend",
        description="disagg-frontend (default): the operator's P/D frontend (`disagg frontend`, from the operator "
        "image); it drives every flow the API offers (NIXL pull, push and bidirectional multi-turn, the render "
        "tier, Mooncake, LMCache, MoRI-IO read and write) and pairs prefill and decode engines of the same pairing "
        "revision only. vllm-router: vllm-router 0.1.17, for the flows it can drive: NIXL pull, Mooncake, "
        "LMCache and MoRI-IO read (not push, bidirectional, the render tier or MoRI-IO write). Ignored with "
        "customContainer.",
    )
    image: Image | None = Field(
        default=None,
        description="Router image. Default: the operator's own image for disagg-frontend (the one it was "
        "installed with), ghcr.io/disagg-dev/vllm-router:0.1.17 for vllm-router (built from PyPI vllm-router "
        "0.1.17; see images/vllm-router in the operator repository).",
    )
    replicas: Annotated[int, Field(ge=0, le=100)] = Field(
        default=1,
        description="Router replicas. Routers keep per-session state in memory (the frontend's conversation "
        "state for bidirectional multi-turn), so stateful policies work best with one replica or sticky clients; "
        "with bidirectional transfer the Service keeps each client on one replica (sessionAffinity ClientIP).",
    )
    policy: RouterPolicy | None = Field(
        default=None,
        description="Routing policy for both pools unless a per-pool policy is set. disagg-frontend offers "
        "round_robin, least_loaded and consistent_hash (conversation id, X-Session-Id, then the body's user); "
        "unset: round_robin, and consistent_hash for decode with bidirectional transfer. vllm-router offers "
        "random, round_robin, cache_aware, kv_aware, power_of_two, consistent_hash and sticky_least_loaded; "
        "unset: cache_aware for prefill (prefix reuse) and power_of_two for decode (load).",
    )
    prefill_policy: RouterPolicy | None = Field(
        default=None, description="Policy for choosing a prefill engine (--prefill-policy of either router)."
    )
    decode_policy: RouterPolicy | None = Field(
        default=None, description="Policy for choosing a decode engine (--decode-policy of either router)."
    )
    port: Port = Field(default=8000, description="Port the router serves the OpenAI API on.")
    admin_port: Port = Field(
        default=8001,
        description="disagg-frontend only: port of its admin API (pair probes, drains, the pair list) and "
        "metrics. It is on the router pods' headless Service, never on the user-facing Service.",
    )
    metrics_port: Port = Field(
        default=29000,
        description="vllm-router only: port of its Prometheus metrics (disagg-frontend serves /metrics on port "
        "and adminPort).",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Router container resources."
    )
    placement: PodPlacement = Field(default_factory=PodPlacement, description="Where router pods run.")
    env: EnvList = Field(default_factory=list, description="Extra environment variables.")
    extra_args: ArgList = Field(
        default_factory=list,
        description="Extra arguments of the router (`disagg frontend ...` or `vllm-router ...`), e.g. "
        "--revision-policy newest or --request-timeout 900 for disagg-frontend. Flags the operator owns "
        "(discovery, ports, flow, P/D mode) are refused.",
    )
    custom_container: CustomContainer | None = Field(
        default=None,
        description="Run this container as the router instead of vllm-router, e.g. the P/D router that ships with a "
        "custom decode engine. Its environment has DISAGG_PREFILL_HOST and DISAGG_DECODE_HOST (the pools' Service "
        "names), usable in args as $(DISAGG_DECODE_HOST).",
    )


class RenderTierSpec(ApiModel):
    """GPU-less `vllm launch render` tier for tokenization and chat templating; engines then run --tokens-only."""

    enabled: bool = Field(default=False, description="Deploy the render tier.")
    replicas: Annotated[int, Field(ge=0, le=1000)] = Field(default=1, description="Render replicas (CPU only).")
    image: Image | None = Field(default=None, description="Image with vLLM. Default: the engine image.")
    workers: Annotated[int, Field(ge=1, le=256)] | None = Field(
        default=None, description="Renderer worker processes per replica (vLLM --renderer-num-workers). vLLM default 1."
    )
    port: Port = Field(default=8000, description="Port of the render server.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Render container resources."
    )
    placement: PodPlacement = Field(default_factory=PodPlacement, description="Where render pods run.")
    env: EnvList = Field(default_factory=list, description="Extra environment variables.")


class ServiceSpec(ApiModel):
    """The user-facing Service named after the DisaggDeployment."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="ClusterIP", description="Service type.")
    port: Port = Field(default=8000, description="Service port of the OpenAI-compatible API.")
    annotations: Annotations = Field(default_factory=dict, description="Service annotations (e.g. for a cloud LB).")
    labels: Labels = Field(default_factory=dict, description="Extra Service labels.")


class FrontendSpec(ApiModel):
    """Everything in front of the engines."""

    router: RouterSpec = Field(default_factory=RouterSpec, description="The P/D-aware router.")
    render: RenderTierSpec = Field(default_factory=RenderTierSpec, description="Optional GPU-less render tier.")
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The user-facing Service.")
