"""The operator's P/D frontend (`disagg frontend`, docs/frontend.md) as the DisaggDeployment's endpoint: its
arguments and its container. The engine pods' side of its contract is rendered by plan/pool.py."""

from __future__ import annotations

from typing import Any

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import ResolvedDeployment
from disagg.frontend.contract import ENGINE_ROLES, EngineRole
from disagg.names import selector_labels

from .model import ContainerPlan, Installation
from .pod import RESTRICTED_CONTAINER, router_resources, user_env

CONVERSATION_TTL_MARGIN_SECONDS = 30
"""The frontend forgets a conversation this long before decode frees its blocks (decoder_kv_blocks_ttl), so a
turn never hands prefill blocks that are already gone; half the TTL when the TTL is shorter than twice this."""
DEFAULT_DECODER_BLOCKS_TTL = 480
"""vLLM's decoder_kv_blocks_ttl."""


def conversation_ttl(blocks_ttl: int) -> float:
    return blocks_ttl - min(CONVERSATION_TTL_MARGIN_SECONDS, blocks_ttl / 2)


def engine_selectors(deployment: ResolvedDeployment) -> dict[EngineRole, dict[str, str]]:
    """The pods of each role the frontend pairs: the pools' API pods (leaders of multi-node replicas) and the
    render tier's pods."""
    selectors: dict[EngineRole, dict[str, str]] = {pool.role: dict(pool.api_selector) for pool in deployment.pools}
    if deployment.tokens_only:
        selectors["render"] = selector_labels(deployment.name, "render")
    return selectors


def frontend_argv(deployment: ResolvedDeployment) -> list[str]:
    """Arguments after `disagg frontend`: the flow, the selectors, the ports and the per-flow settings."""
    router = deployment.frontend.router
    flow = deployment.flow
    assert flow is not None, "a router is only planned for a transfer with a P/D protocol"
    argv = ["--flow", flow]
    if deployment.tokens_only:
        argv.append("--render")
    selectors = engine_selectors(deployment)
    for role in ENGINE_ROLES:
        for key, value in selectors.get(role, {}).items():
            argv += [f"--{role}-selector", f"{key}={value}"]
    argv += ["--port", str(router.port), "--admin-port", str(router.admin_port)]
    argv += ["--engine-port", str(ENGINE_HTTP_PORT)]
    argv += ["--model", deployment.model.served_name or deployment.model.name]
    prefill_policy = router.prefill_policy or router.policy
    decode_policy = router.decode_policy or router.policy
    if prefill_policy:
        argv += ["--prefill-policy", prefill_policy]
    if decode_policy:
        argv += ["--decode-policy", decode_policy]  # unset: the frontend's per-flow default (D64)
    if flow == "bidirectional":
        blocks = deployment.transfer.nixl.bidirectional.blocks_ttl_seconds or DEFAULT_DECODER_BLOCKS_TTL
        argv += ["--decoder-blocks-ttl", str(blocks), "--conversation-ttl", f"{conversation_ttl(blocks):g}"]
    argv += list(router.extra_args)
    return argv


def frontend_container(
    deployment: ResolvedDeployment, installation: Installation, argv: list[str], env: list[dict[str, Any]]
) -> ContainerPlan:
    router = deployment.frontend.router
    get = {"path": "/health", "port": "http"}
    return ContainerPlan(
        name="router",
        image=router.image or installation.frontend_image,
        image_pull_policy="IfNotPresent",
        command=["disagg", "frontend"],
        args=argv,
        env=[*env, *user_env(router.env)],
        ports=[
            {"name": "http", "containerPort": router.port, "protocol": "TCP"},
            {"name": "admin", "containerPort": router.admin_port, "protocol": "TCP"},
        ],
        resources=router_resources(router.resources),
        probes={
            "livenessProbe": {"httpGet": get, "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 5},
            # Ready only with a complete pair of one pairing revision (and a render server with the render tier):
            # a frontend that cannot serve takes itself out of the Service, and status shows the router not ready.
            "readinessProbe": {
                "httpGet": {"path": "/ready", "port": "http"},
                "periodSeconds": 5,
                "failureThreshold": 2,
                "timeoutSeconds": 5,
            },
        },
        volume_mounts=[{"name": "tmp", "mountPath": "/tmp"}],
        security_context=RESTRICTED_CONTAINER,
    )
