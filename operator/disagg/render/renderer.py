"""plan -> objects. Templates give each kind its shape; the plan gives every value."""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
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
_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _astral(match: re.Match[str]) -> str:
    high, low = int(match.group(2), 16), int(match.group(3), 16)
    return f"{match.group(1)}\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


def yaml_json(value: Any) -> str:
    """JSON that YAML reads back as the same value. json.dumps writes a character beyond the Basic Multilingual
    Plane as a UTF-16 surrogate pair (\\ud83d\\ude00), which YAML's double-quoted scalars refuse; YAML's own
    \\U0001f600 says the same. (DEL, which a YAML stream may not hold raw, json.dumps already writes as \\u007f.)
    Keys are sorted, as Jinja's own tojson does. Templates place every value through this filter."""
    return _SURROGATE_PAIR.sub(_astral, json.dumps(value, sort_keys=True))


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("disagg.render", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,  # package files: checking their mtimes on every render was a stat per template
    )
    environment.filters["tojson"] = yaml_json
    return environment


_STR, _MAP, _SEQ = ("tag:yaml.org,2002:" + name for name in ("str", "map", "seq"))


def _construct(loader: Any, node: yaml.Node) -> Any:
    """What `loader.construct_document(node)` returns, faster for what templates produce: strings, maps with string
    keys and lists are built here (PyYAML's constructor spends most of reading a rendered object on them); every
    other node (numbers, booleans, nulls, and any map with a key that is not a plain string, such as a merge key) is
    left to PyYAML's own constructor."""
    if isinstance(node, yaml.ScalarNode) and node.tag == _STR:
        return node.value
    if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
        return [_construct(loader, item) for item in node.value]
    if (
        isinstance(node, yaml.MappingNode)
        and node.tag == _MAP
        and all(isinstance(key, yaml.ScalarNode) and key.tag == _STR for key, _ in node.value)
    ):
        return {key.value: _construct(loader, value) for key, value in node.value}
    return loader.construct_document(node)


def read_yaml(text: str) -> Any:
    """`yaml.load(text, Loader=CSafeLoader)`, with the common nodes built by `_construct`."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _construct(loader, node)
    finally:
        loader.dispose()


@lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    """Reading the YAML back is two thirds of rendering, and most passes render the very texts of the last pass
    (children that did not change), for every DisaggDeployment; so a text is read once."""
    return read_yaml(text)


def _copy(value: Any) -> Any:
    """A fresh copy of what YAML read (maps, lists and scalars), so that no caller shares _parsed's objects."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _render(kind: Kind, **values: Any) -> dict[str, Any]:
    text = _environment().get_template(f"{kind.name}.yaml.j2").render(kind=kind, **values)
    document = _copy(_parsed(text))
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
