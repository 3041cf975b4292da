"""The pure core's answer per DisaggDeployment, kept until its spec changes (D121).

validate -> plan -> render is a pure function of the DisaggDeployment's identity and spec, and by far the most
expensive part of a pass (tens of milliseconds, mostly parsing the templates' YAML). A pass triggered by a child's
or a pod's event, or by a resync, would compute the same answer again; this memo returns it instead. Each pass
gets its own copy of the objects (the apply step changes them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from disagg.api.deployment import DisaggDeploymentSpec
from disagg.api.errors import Problem
from disagg.api.validate import ValidationResult, validate_deployment
from disagg.plan import build_plan
from disagg.plan.model import DEFAULT_INSTALLATION, DeploymentPlan, Installation
from disagg.render import render_plan

from . import codec
from .applied import digest, sent_digest
from .cache import OwnerKey

log = logging.getLogger("disagg.reconcile")


@dataclass(frozen=True)
class Core:
    spec: DisaggDeploymentSpec
    plan: DeploymentPlan
    texts: tuple[bytes, ...]
    """The rendered objects as JSON, in apply order."""
    sent: dict[tuple[str, str], str]
    """Per (kind, name): the digest of what applying the object as rendered sends (`applied.sent_digest`), for the
    children whose replicas no autoscaler holds: the applied memo's key, computed once per spec, not per pass."""

    def desired(self) -> list[dict[str, Any]]:
        return [codec.loads(text) for text in self.texts]


def _key(owner: dict[str, Any]) -> str:
    metadata = owner.get("metadata") or {}
    return digest([metadata.get("uid"), metadata.get("labels"), metadata.get("annotations"), owner.get("spec")])


def compute(
    owner: dict[str, Any], namespace: str, installation: Installation = DEFAULT_INSTALLATION
) -> Core | ValidationResult:
    """validate -> plan -> render. A spec the core cannot handle is reported like an invalid one (with the
    exception's message) instead of failing every pass: retrying cannot change a pure function's answer."""
    try:
        result = validate_deployment(owner)
        if result.deployment is None:
            return result
        plan = build_plan(result.deployment, namespace, installation)
        objects = render_plan(plan)
        texts = tuple(codec.dumps(obj) for obj in objects)
        sent = {(obj["kind"], obj["metadata"]["name"]): sent_digest(obj, False, None) for obj in objects}
        return Core(result.deployment.spec, plan, texts, sent)
    except Exception as exc:
        log.exception("rendering %s/%s failed", namespace, (owner.get("metadata") or {}).get("name"))
        problem = Problem(
            "spec",
            f"the operator could not render this spec ({type(exc).__name__}: {exc})",
            "this is a bug in disagg-operator; please report it with the spec. Until it is fixed, change the "
            "setting the message points at",
        )
        return ValidationResult(problems=[problem])


class CoreMemo:
    """One answer per DisaggDeployment: the one for its current spec."""

    def __init__(
        self,
        core: Callable[[dict[str, Any], str, Installation], Core | ValidationResult] = compute,
        installation: Installation = DEFAULT_INSTALLATION,
    ) -> None:
        self._core = core
        self._installation = installation
        self._answers: dict[OwnerKey, tuple[str, Core | ValidationResult]] = {}

    def get(self, owner: dict[str, Any]) -> Core | ValidationResult:
        metadata = owner["metadata"]
        owner_key = (metadata["namespace"], metadata["name"])
        key = _key(owner)
        known = self._answers.get(owner_key)
        if known is not None and known[0] == key:
            return known[1]
        answer = self._core(owner, metadata["namespace"], self._installation)
        self._answers[owner_key] = (key, answer)
        return answer

    def forget(self, owner: OwnerKey) -> None:
        self._answers.pop(owner, None)
