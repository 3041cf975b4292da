"""The GPU-less render tier: `vllm launch render` with the same chat template and parsers as the engines."""

from __future__ import annotations

from dataclasses import dataclass

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.engine import DEFAULT_ENGINE_IMAGE
from disagg.names import child_name, common_labels, selector_labels

from .engine_args import chat_argv
from .model import ContainerPlan, PodPlan, ServicePlan, WorkloadPlan
from .pod import model_env, model_volume, tolerations, user_env


@dataclass(frozen=True)
class RenderTierPlan:
    workload: WorkloadPlan
    service: ServicePlan
    argv: list[str]


def render_argv(spec: DisaggDeploymentSpec) -> list[str]:
    """Arguments after `vllm launch render`."""
    render = spec.frontend.render
    model = spec.model
    argv = [model.name, "--served-model-name", model.served_name or model.name, "--port", str(render.port)]
    if model.revision:
        argv += ["--revision", model.revision]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if spec.engine.max_model_len is not None:
        argv += ["--max-model-len", str(spec.engine.max_model_len)]
    argv += chat_argv(spec.engine.chat)
    if render.workers is not None:
        argv += ["--renderer-num-workers", str(render.workers)]
    return argv


def plan_render_tier(spec: DisaggDeploymentSpec, deployment: str) -> RenderTierPlan | None:
    render = spec.frontend.render
    if not render.enabled:
        return None
    argv = render_argv(spec)
    volume, mount = model_volume(spec.model.storage)
    requests = {name: str(value) for name, value in render.resources.requests.items()} or {"cpu": "1", "memory": "2Gi"}
    limits = {name: str(value) for name, value in render.resources.limits.items()}
    get = {"path": "/health", "port": "http"}
    container = ContainerPlan(
        name="render",
        image=render.image or spec.engine.image or DEFAULT_ENGINE_IMAGE,
        image_pull_policy=spec.engine.image_pull_policy or "IfNotPresent",
        command=["vllm", "launch", "render"],
        args=argv,
        env=[*model_env(spec), *user_env(render.env)],
        ports=[{"name": "http", "containerPort": render.port, "protocol": "TCP"}],
        resources={"requests": requests, "limits": limits},
        volume_mounts=[mount],
        probes={
            "startupProbe": {"httpGet": get, "periodSeconds": 5, "failureThreshold": 120},
            "livenessProbe": {"httpGet": get, "periodSeconds": 10, "failureThreshold": 3},
            "readinessProbe": {"httpGet": get, "periodSeconds": 5, "failureThreshold": 2},
        },
    )
    name = child_name(deployment, "render")
    labels = common_labels(deployment, "render")
    extra: dict[str, object] = {}
    if render.placement.node_selector:
        extra["nodeSelector"] = dict(render.placement.node_selector)
    if render.placement.tolerations:
        extra["tolerations"] = tolerations(render.placement.tolerations)
    pod = PodPlan(labels=labels, annotations={}, containers=[container], volumes=[volume], spec_extra=extra)
    workload = WorkloadPlan(
        "Deployment",
        name,
        "render",
        labels,
        selector_labels(deployment, "render"),
        render.replicas,
        pod,
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    )
    service = ServicePlan(
        name,
        labels,
        selector_labels(deployment, "render"),
        [{"name": "http", "port": render.port, "targetPort": "http", "protocol": "TCP"}],
    )
    return RenderTierPlan(workload, service, argv)
