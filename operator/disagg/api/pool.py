"""`spec.prefill` and `spec.decode`: the two engine pools."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from disagg.names import PoolName as PoolName  # re-exported: scaling/ still imports it from here

from .base import ApiModel
from .cel import CelRule, exactly_one_of, with_cel
from .engine import EngineSettings
from .errors import rule_error
from .placement import Affinity, TopologySpreadConstraint
from .types import (
    Annotations,
    ArgList,
    DnsLabel,
    EnvList,
    Image,
    IntOrPercent,
    LabelKey,
    Labels,
    ObjectName,
    Port,
    Quantity,
    ResourceList,
    ResourceName,
    Toleration,
)

Parallel = Annotated[int, Field(ge=1, le=1024)]


class ResourceClaim(ApiModel):
    """A Dynamic Resource Allocation claim (resource.k8s.io) that every engine pod of the pool makes, e.g. the
    channel of an NVIDIA ComputeDomain for multi-node NVLink (GB200/GB300 NVL72) or a DRA-managed GPU or NIC."""

    model_config = with_cel(
        CelRule(
            rule=exactly_one_of("resourceClaimTemplateName", "resourceClaimName"),
            message="a resource claim needs exactly one of resourceClaimTemplateName or resourceClaimName",
        )
    )

    name: DnsLabel = Field(description="Name of the claim inside the pod (unique in the list).")
    resource_claim_template_name: ObjectName | None = Field(
        default=None,
        description="ResourceClaimTemplate in the DisaggDeployment's namespace: each pod gets its own claim made "
        "from it. A ComputeDomain names the template it creates in spec.channel.resourceClaimTemplate.name.",
    )
    resource_claim_name: ObjectName | None = Field(
        default=None, description="An existing ResourceClaim in the namespace, shared by every pod of the pool."
    )


class PoolResources(ApiModel):
    """Resources of one engine pod (one node of a replica)."""

    gpu_resource_name: ResourceName = Field(
        default="nvidia.com/gpu",
        description="Extended resource that grants GPUs: nvidia.com/gpu or amd.com/gpu (or a MIG/partition name).",
    )
    cpu: Quantity | None = Field(default=None, description="CPU request (and limit) of each engine pod.")
    memory: Quantity | None = Field(
        default=None,
        description="Memory request and limit of each engine pod, before CPU KV tiers are added.",
    )
    shm_size: Quantity = Field(
        default="16Gi",
        description="Size of /dev/shm (a memory-backed emptyDir) used by vLLM's worker processes.",
    )
    extra: ResourceList = Field(
        default_factory=dict,
        description="More resources to request and limit, e.g. ephemeral-storage or a vendor device.",
    )
    claims: Annotated[list[ResourceClaim], Field(max_length=8)] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Dynamic Resource Allocation claims of each engine pod (pod resourceClaims, used by the engine "
        "container), e.g. a ComputeDomain channel so a multi-node replica shares NVLink across trays.",
    )


def _one_constraint_per_key(constraints: list[TopologySpreadConstraint]) -> list[TopologySpreadConstraint]:
    seen = set()
    for constraint in constraints:
        key = (constraint.topology_key, constraint.when_unsatisfiable)
        if key in seen:
            raise rule_error(
                f"two constraints spread over {key[0]} with whenUnsatisfiable {key[1]}",
                "keep one constraint per topologyKey and whenUnsatisfiable",
            )
        seen.add(key)
    return constraints


class Scheduling(ApiModel):
    """Where engine pods may run."""

    node_selector: Labels = Field(default_factory=dict, description="Node labels the pods require.")
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = Field(
        default_factory=list, description="Taints the pods tolerate (GPU nodes are often tainted)."
    )
    affinity: Affinity | None = Field(
        default=None,
        description="Kubernetes affinity (nodeAffinity, podAffinity, podAntiAffinity) as in a pod spec.",
    )
    topology_spread_constraints: Annotated[
        list[TopologySpreadConstraint], Field(max_length=8), AfterValidator(_one_constraint_per_key)
    ] = Field(
        default_factory=list,
        description="Kubernetes topologySpreadConstraints as in a pod spec. Their labelSelector may use the "
        "pool's labels (disagg.dev/deployment, disagg.dev/role).",
    )
    priority_class_name: ObjectName | None = Field(default=None, description="PriorityClass of the pods.")
    scheduler_name: ObjectName | None = Field(
        default=None, description="Scheduler for the pods, e.g. a gang scheduler for multi-node replicas."
    )
    runtime_class_name: ObjectName | None = Field(default=None, description="RuntimeClass of the pods.")
    replica_topology_key: LabelKey | None = Field(
        default=None,
        description="Multi-node replicas only: a node label every pod of one replica must share, e.g. "
        "nvidia.com/gpu.clique (one NVLink domain of a GB200/GB300 NVL72 rack) or topology.kubernetes.io/zone. "
        "Rendered as a required podAffinity among the pods of the same LeaderWorkerSet group.",
    )


class Rollout(ApiModel):
    """How a pool is updated. Defaults: prefill replaces one pod at a time without surge (maxSurge 0,
    maxUnavailable 1); decode surges first so its last replica never disappears (maxSurge 1, maxUnavailable 0)."""

    max_surge: IntOrPercent | None = Field(
        default=None, description="Extra replicas allowed during an update (count or percentage)."
    )
    max_unavailable: IntOrPercent | None = Field(
        default=None, description="Replicas that may be unavailable during an update (count or percentage)."
    )


class Autoscaling(ApiModel):
    """Replica bounds when the pool is scaled from metrics."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas: lower minReplicas or raise "
            "maxReplicas",
        )
    )

    enabled: bool = Field(
        default=False,
        description="Scale this pool from metrics. Its replicas then belong to the scaler and spec.replicas is only "
        "the starting point.",
    )
    controller: Literal["operator", "external"] = Field(
        default="operator",
        description="operator: the DisaggDeployment's own SLO-driven scaler. external: an HPA or KEDA owns the "
        "replicas of the pool's workload and the operator never writes them.",
    )
    min_replicas: Annotated[int, Field(ge=0, le=10_000)] = Field(default=1, description="Fewest replicas.")
    max_replicas: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, description="Most replicas. Required when enabled with the operator controller."
    )


class CustomContainer(ApiModel):
    """Run a non-vLLM engine for this pool (decode only, with a custom connector), e.g. a TileRT decode server."""

    image: Image = Field(description="Container image of the engine.")
    command: ArgList = Field(default_factory=list, description="Entrypoint. Empty keeps the image's.")
    args: ArgList = Field(default_factory=list, description="Arguments.")
    port: Port = Field(default=8000, description="HTTP port the engine serves on.")
    extra_ports: Annotated[
        dict[Annotated[str, Field(max_length=15, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")], Port],
        Field(max_length=8),
    ] = Field(default_factory=dict, description="More named container ports, e.g. {ctrl: 5556}.")
    health_path: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^/")] = Field(
        default="/health", description="HTTP path used by liveness and readiness probes."
    )
    env: EnvList = Field(default_factory=list, description="Environment variables.")


class PoolSpec(ApiModel):
    """One engine pool: replicas, parallelism, resources, scheduling, rollout and autoscaling bounds."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.scheduling) || !has(self.scheduling.replicaTopologyKey) || self.nodesPerReplica > 1",
            message="scheduling.replicaTopologyKey keeps the pods of a multi-node replica together: it needs "
            "nodesPerReplica > 1 (use scheduling.affinity for single-node pools)",
            field_path=".scheduling.replicaTopologyKey",
        ),
        CelRule(
            rule="self.tensorParallel % self.decodeContextParallel == 0",
            message="decodeContextParallel must divide tensorParallel (DCP reuses the TP ranks): choose a DCP such as "
            "1, 2 or tensorParallel",
            field_path=".decodeContextParallel",
        ),
        CelRule(
            rule="!has(self.gpusPerNode) || self.tensorParallel * self.pipelineParallel * self.prefillContextParallel"
            " * self.dataParallel == self.gpusPerNode * self.nodesPerReplica",
            message="GPUs per replica (tensorParallel x pipelineParallel x prefillContextParallel x dataParallel) "
            "must equal gpusPerNode x nodesPerReplica: fix the parallelism or gpusPerNode",
            field_path=".gpusPerNode",
        ),
        CelRule(
            rule="(self.tensorParallel * self.pipelineParallel * self.prefillContextParallel * self.dataParallel)"
            " % self.nodesPerReplica == 0",
            message="GPUs per replica (tensorParallel x pipelineParallel x prefillContextParallel x dataParallel) "
            "must split evenly across nodesPerReplica: change nodesPerReplica or the parallelism",
            field_path=".nodesPerReplica",
        ),
        CelRule(
            rule="self.nodesPerReplica == 1 || self.dataParallel == 1 || self.dataParallel % self.nodesPerReplica == 0",
            message="dataParallel must be a multiple of nodesPerReplica so every node hosts the same ranks (or use "
            "dataParallel 1 to span nodes with tensor/pipeline parallelism)",
            field_path=".dataParallel",
        ),
    )

    replicas: Annotated[int, Field(ge=0, le=10_000)] = Field(
        default=1, description="Engine replicas (each replica is one vLLM API endpoint, possibly spanning nodes)."
    )
    tensor_parallel: Parallel = Field(default=1, description="Tensor-parallel size (vLLM --tensor-parallel-size).")
    pipeline_parallel: Parallel = Field(
        default=1, description="Pipeline-parallel size (vLLM --pipeline-parallel-size)."
    )
    data_parallel: Parallel = Field(
        default=1,
        description="Data-parallel ranks inside one replica (vLLM --data-parallel-size); with expertParallel this "
        "forms DEP/wide-EP.",
    )
    expert_parallel: bool = Field(
        default=False, description="Shard MoE experts across the replica's GPUs (vLLM --enable-expert-parallel)."
    )
    decode_context_parallel: Parallel = Field(
        default=1,
        description="Decode context parallelism (vLLM --decode-context-parallel-size); reuses TP ranks, so it must "
        "divide tensorParallel.",
    )
    prefill_context_parallel: Parallel = Field(
        default=1, description="Prefill context parallelism (vLLM --prefill-context-parallel-size); prefill only."
    )
    nodes_per_replica: Annotated[int, Field(ge=1, le=512)] = Field(
        default=1,
        description="Nodes one replica spans. Above 1 the pool becomes a LeaderWorkerSet: data-parallel ranks are "
        "spread over the nodes, or, with dataParallel 1, tensor/pipeline ranks are.",
    )
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="GPUs each pod requests. Default: GPUs per replica / nodesPerReplica. If set, it must equal "
        "that number.",
    )
    resources: PoolResources = Field(default_factory=PoolResources, description="Resources of each pod.")
    engine: EngineSettings = Field(
        default_factory=EngineSettings,
        description="Engine settings for this pool; set fields override spec.engine.",
    )
    custom_container: CustomContainer | None = Field(
        default=None,
        description="Run this non-vLLM container instead of vLLM (decode pool with a custom connector only).",
    )
    scheduling: Scheduling = Field(default_factory=Scheduling, description="Node selection and placement.")
    rollout: Rollout = Field(default_factory=Rollout, description="Update strategy.")
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, description="Metric-driven scaling bounds.")
    pod_labels: Labels = Field(default_factory=dict, description="Extra labels for the pool's pods.")
    pod_annotations: Annotations = Field(default_factory=dict, description="Extra annotations for the pool's pods.")
    service_account_name: ObjectName | None = Field(
        default=None, description="ServiceAccount the engine pods run as. Default: the namespace default."
    )
    termination_grace_period_seconds: Annotated[int, Field(ge=0, le=86_400)] | None = Field(
        default=None,
        description="Override of the pod termination grace period. Default: the engine's shutdown timeout plus 30s.",
    )
