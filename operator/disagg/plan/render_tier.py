"""The GPU-less render tier: `vllm launch render` with the same chat template and parsers as the engines."""

from __future__ import annotations

from dataclasses import dataclass

from disagg.api.engine import ChatSettings
from disagg.api.frontend import RenderTierSpec
from disagg.api.model import ModelSpec
from disagg.api.resolve import ResolvedDeployment
from disagg.frontend.contract import ANNOTATION_HTTP_PORT
from disagg.names import child_name, common_labels, selector_labels

from .engine_args import chat_argv
from .model import ContainerPlan, PodPlan, ServicePlan, WorkloadPlan
from .pod import container_resources, model_env, model_volume, tolerations, user_env

DEFAULT_RENDER_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {}}


@dataclass(frozen=True)
class RenderTierPlan:
    workload: WorkloadPlan
    service: ServicePlan
    argv: list[str]


def render_tier_argv(
    model: ModelSpec, chat: ChatSettings, tier: RenderTierSpec, max_model_len: int | None
) -> list[str]:
    """Arguments after `vllm launch render`."""
    argv = [model.name, "--served-model-name", model.served_name or model.name, "--port", str(tier.port)]
    if model.revision:
        argv += ["--revision", model.revision]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    argv += chat_argv(chat)
    if tier.workers is not None:
        argv += ["--renderer-num-workers", str(tier.workers)]
    return argv


def plan_render_tier(deployment: ResolvedDeployment) -> RenderTierPlan | None:
    tier = deployment.frontend.render
    if not tier.enabled:
        return None
    argv = render_tier_argv(deployment.model, deployment.chat, tier, deployment.max_model_len)
    volume, mount = model_volume(deployment.model.storage)
    get = {"path": "/health", "port": "http"}
    container = ContainerPlan(
        name="render",
        image=tier.image or deployment.shared_image,
        image_pull_policy=deployment.shared_pull_policy,
        command=["vllm", "launch", "render"],
        args=argv,
        env=[*model_env(deployment.model.storage), *user_env(tier.env)],
        ports=[{"name": "http", "containerPort": tier.port, "protocol": "TCP"}],
        resources=container_resources(tier.resources, DEFAULT_RENDER_RESOURCES),
        volume_mounts=[mount],
        probes={
            "startupProbe": {"httpGet": get, "periodSeconds": 5, "failureThreshold": 120},
            "livenessProbe": {"httpGet": get, "periodSeconds": 10, "failureThreshold": 3},
            "readinessProbe": {"httpGet": get, "periodSeconds": 5, "failureThreshold": 2},
        },
    )
    name = child_name(deployment.name, "render")
    labels = common_labels(deployment.name, "render")
    extra: dict[str, object] = {"automountServiceAccountToken": False}  # it never calls the Kubernetes API (D77)
    if tier.placement.node_selector:
        extra["nodeSelector"] = dict(tier.placement.node_selector)
    if tier.placement.tolerations:
        extra["tolerations"] = tolerations(tier.placement.tolerations)
    # The frontend finds render servers by this port (the pod contract); engines carry theirs too.
    annotations = {ANNOTATION_HTTP_PORT: str(tier.port)}
    pod = PodPlan(labels=labels, annotations=annotations, containers=[container], volumes=[volume], spec_extra=extra)
    workload = WorkloadPlan(
        "Deployment",
        name,
        "render",
        labels,
        selector_labels(deployment.name, "render"),
        tier.replicas,
        pod,
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    )
    service = ServicePlan(
        name,
        labels,
        selector_labels(deployment.name, "render"),
        [{"name": "http", "port": tier.port, "targetPort": "http", "protocol": "TCP"}],
    )
    return RenderTierPlan(workload, service, argv)
