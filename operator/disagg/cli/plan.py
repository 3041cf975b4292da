"""`disagg plan`: explain what the operator decided, in the terms of vLLM and the router."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from disagg.api.resolve import PodMemory
from disagg.api.units import format_binary_quantity
from disagg.plan import build_plan
from disagg.plan.model import Installation

from ._inputs import FILES_OPTION, FRONTEND_IMAGE_OPTION, load_valid


@click.command(name="plan")
@FILES_OPTION
@FRONTEND_IMAGE_OPTION
def plan_command(files: tuple[Path, ...], frontend_image: str) -> None:
    """Show the engine, router and render commands, connector settings and workloads for DisaggDeployments."""
    for deployment in load_valid(files):
        installation = Installation(frontend_image=frontend_image)
        plan = build_plan(deployment, deployment.metadata.namespace or "default", installation)
        click.echo(f"DisaggDeployment {plan.name}  (model family: {plan.family}, endpoint: {plan.endpoint})")
        for workload in plan.workloads:
            group = f" x {workload.group_size} pods per replica" if workload.kind == "LeaderWorkerSet" else ""
            owner = " (replicas owned by the autoscaler)" if workload.replicas_owned_elsewhere else ""
            noun = "replica" if workload.replicas == 1 else "replicas"
            click.echo(f"  {workload.kind} {workload.name}: {workload.replicas} {noun}{group}{owner}")
        for role, memory in plan.pod_memory.items():
            click.echo(f"  {role} pod memory: {describe_memory(role, memory)}")
        for engine in plan.engines:
            click.echo(f"\n  {engine.role}: vllm serve {shlex.join(engine.argv)}")
            if engine.worker_argv is not None:
                click.echo(f"  {engine.role} worker 1: vllm serve {shlex.join(engine.worker_argv)}")
            if engine.kv_transfer_config is not None:
                pretty = json.dumps(engine.kv_transfer_config, indent=2).replace("\n", "\n    ")
                click.echo(f"  {engine.role} --kv-transfer-config:\n    {pretty}")
            env = " ".join(f"{key}={value}" for key, value in engine.env.items())
            click.echo(f"  {engine.role} environment: {env}")
        click.echo(f"\n  pairing revision: {plan.pairing.revision} (generation {plan.pairing.generation})")
        if plan.router_argv is not None:
            click.echo(f"  router: vllm-router {shlex.join(plan.router_argv)}")
        if plan.frontend_argv is not None:
            click.echo(f"  router: disagg frontend {shlex.join(plan.frontend_argv)}")
        if plan.render_tier_argv is not None:
            click.echo(f"  render: vllm launch render {shlex.join(plan.render_tier_argv)}")
        click.echo("")


def describe_memory(role: str, memory: PodMemory) -> str:
    """The pod's memory request and limit and where they come from, with /dev/shm, which counts against them."""
    parts = []
    if memory.given is not None:
        parts.append(f"{format_binary_quantity(memory.given)} spec.{role}.resources.memory")
    if memory.pinned:
        engines = "engine" if memory.engines == 1 else "engines"
        each = format_binary_quantity(memory.pinned_per_engine)
        parts.append(
            f"{format_binary_quantity(memory.pinned)} pinned for KV tiers ({memory.engines} {engines} x {each})"
        )
    shm = f"/dev/shm up to {format_binary_quantity(memory.shm)} (memory-backed: it counts against the pod's memory)"
    if memory.request is None:
        return f"no request or limit (set spec.{role}.resources.memory); {shm}"
    request = format_binary_quantity(memory.request)
    limit = "no limit" if memory.limit is None else f"limit {format_binary_quantity(memory.limit)}"
    return f"request {request}, {limit} = {' + '.join(parts)}; {shm}"
