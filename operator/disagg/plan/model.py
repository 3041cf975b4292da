"""The plan: every value the rendered objects need, decided, typed and ordered. Templates only place them.

Fragments that are already Kubernetes-shaped (env entries, ports, volumes, probes, resources) are kept as plain
JSON-like values so templates can emit them verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from disagg import __version__
from disagg.api.resolve import PodMemory, ResolvedFamily, RouterKind
from disagg.api.serving import CheckMode
from disagg.names import PoolName

from .pairing import Pairing

if TYPE_CHECKING:
    from .serving import ServingPlan

Json = Any
WorkloadKind = Literal["Deployment", "LeaderWorkerSet", "DaemonSet"]

DEFAULT_FRONTEND_IMAGE = f"ghcr.io/disagg-dev/disagg-operator:{__version__}"
"""The image `disagg frontend` runs from when nothing else is said: the operator's own release image."""


@dataclass(frozen=True)
class Installation:
    """What the operator installation decides for every DisaggDeployment (`disagg run --frontend-image`, set by
    the Helm chart to the operator's own image, so the frontend and the operator always come from one build)."""

    frontend_image: str = DEFAULT_FRONTEND_IMAGE
    serving_check: CheckMode = "Enforce"
    """The serving check's mode where a spec leaves spec.serving.check.mode unset (`disagg run --serving-check`;
    "Off" when the operator runs no checker): it decides whether engine pods carry the serving readiness gate."""


DEFAULT_INSTALLATION = Installation()


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    image: str
    image_pull_policy: str
    command: list[str]
    args: list[str]
    env: list[Json] = field(default_factory=list)
    ports: list[Json] = field(default_factory=list)
    resources: Json = field(default_factory=dict)
    volume_mounts: list[Json] = field(default_factory=list)
    probes: dict[str, Json] = field(default_factory=dict)
    security_context: Json | None = None
    lifecycle: Json | None = None


@dataclass(frozen=True)
class PodPlan:
    labels: dict[str, str]
    annotations: dict[str, str]
    containers: list[ContainerPlan]
    volumes: list[Json] = field(default_factory=list)
    spec_extra: dict[str, Json] = field(default_factory=dict)
    """Optional pod-spec fields that are present only when set (scheduling, host network, service account...)."""


@dataclass(frozen=True)
class WorkloadPlan:
    kind: WorkloadKind
    name: str
    role: str
    labels: dict[str, str]
    selector: dict[str, str]
    replicas: int
    pod: PodPlan
    strategy: Json
    group_size: int = 1
    worker_pod: PodPlan | None = None
    startup_policy: str | None = None
    """LeaderWorkerSet only: when the workers of a group are created."""
    group_restart_policy: str | None = None
    """LeaderWorkerSet only: what a failing pod does to its group."""
    replicas_owned_elsewhere: bool = False
    """True when an autoscaler (ours or an external HPA/KEDA) owns the replica count. `replicas` is then the count
    a new workload starts with; reconcile/ownership.py decides when the field is handed over to that owner."""


@dataclass(frozen=True)
class ServicePlan:
    name: str
    labels: dict[str, str]
    selector: dict[str, str]
    ports: list[Json]
    annotations: dict[str, str] = field(default_factory=dict)
    type: str = "ClusterIP"
    headless: bool = False
    """No cluster IP: the name resolves straight to the pods' IPs (and costs no address from the Service range)."""
    session_affinity: str | None = None
    """`ClientIP` keeps each client on one router replica (the frontend's conversation state is per replica)."""


@dataclass(frozen=True)
class ConfigMapPlan:
    name: str
    labels: dict[str, str]
    data: dict[str, str]


@dataclass(frozen=True)
class RbacPlan:
    """What the router needs to discover engine pods: read access to pods in its own namespace only."""

    name: str
    labels: dict[str, str]
    rules: list[Json]


@dataclass(frozen=True)
class EngineCommand:
    """A pool's vLLM invocation, as the engines will run it (for review and for contract tests)."""

    role: PoolName
    argv: list[str]
    """Everything after `vllm serve` on the API pod (the leader, for multi-node replicas)."""
    worker_argv: list[str] | None
    """Everything after `vllm serve` on worker pods of multi-node replicas (leader address left as $(...))."""
    kv_transfer_config: Json | None
    env: dict[str, str]
    """Literal environment variables (values taken from the downward API are shown as $(NAME) placeholders)."""


@dataclass(frozen=True)
class DeploymentPlan:
    name: str
    namespace: str | None
    owner_references: list[Json]
    """The controller reference every child carries, when the DisaggDeployment has a uid (it was read from a
    cluster); empty for a file that was never applied."""
    family: ResolvedFamily
    endpoint: str
    workloads: list[WorkloadPlan]
    services: list[ServicePlan]
    config_maps: list[ConfigMapPlan]
    rbac: RbacPlan | None
    engines: list[EngineCommand]
    router: RouterKind | None
    """What fronts the engines: the operator's frontend, vllm-router, a custom container, or nothing."""
    router_argv: list[str] | None
    """Arguments after `vllm-router`, or None when no vllm-router is deployed."""
    frontend_argv: list[str] | None
    """Arguments after `disagg frontend`, or None when the operator's frontend is not deployed."""
    pairing: Pairing
    """The pairing revision every engine pod carries, with its generation."""
    render_tier_argv: list[str] | None
    """Arguments after `vllm launch render` (vLLM's GPU-less render tier), or None without one."""
    serving: ServingPlan
    """How the serving check reaches the path and what it gates."""
    pod_memory: dict[PoolName, PodMemory] = field(default_factory=dict)
    """What each pool's engine pods get in memory, for review (the resources carry the same numbers)."""
