"""plan -> objects. Templates give each kind its shape; the plan gives every value."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
import yaml

from disagg.api.deployment import DisaggDeployment
from disagg.names import (
    CHILD_KINDS,
    CONFIG_MAP,
    KINDS,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
)
from disagg.plan import DeploymentPlan, build_plan

KIND_ORDER = tuple(kind.name for kind in CHILD_KINDS)
"""Apply order: identities and configuration before the pods that use them."""

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("disagg.render", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _render(kind: Kind, **values: Any) -> dict[str, Any]:
    text = _environment().get_template(f"{kind.name}.yaml.j2").render(kind=kind, **values)
    document = yaml.load(text, Loader=_Loader)
    assert isinstance(document, dict), f"template {kind.name} did not produce an object"
    return document


def render_plan(plan: DeploymentPlan) -> list[dict[str, Any]]:
    """Every object of the plan, complete (namespace and owner references included), sorted by kind (apply order)
    and name. Workloads carry the plan's replica count even when an autoscaler owns it: that is the count a new
    workload starts with, and the reconciler decides when to stop sending it (reconcile/ownership.py)."""
    shared = {"namespace": plan.namespace, "owner_references": plan.owner_references}
    objects: list[dict[str, Any]] = []
    if plan.rbac is not None:
        objects.append(_render(SERVICE_ACCOUNT, r=plan.rbac, **shared))
        objects.append(_render(ROLE, r=plan.rbac, **shared))
        objects.append(_render(ROLE_BINDING, r=plan.rbac, role_kind=ROLE, subject_kind=SERVICE_ACCOUNT, **shared))
    objects += [_render(CONFIG_MAP, c=config, **shared) for config in plan.config_maps]
    objects += [_render(SERVICE, s=service, **shared) for service in plan.services]
    objects += [_render(KINDS[workload.kind], w=workload, **shared) for workload in plan.workloads]
    return sorted(objects, key=lambda obj: (KIND_ORDER.index(obj["kind"]), obj["metadata"]["name"]))


def render_deployment(deployment: DisaggDeployment, namespace: str | None = None) -> list[dict[str, Any]]:
    """spec -> plan -> objects, the whole pure pipeline."""
    return render_plan(build_plan(deployment, namespace))
