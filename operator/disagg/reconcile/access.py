"""The RBAC the operator needs, derived from what it does: each grant names the call that needs it.

These sources need permissions:
- the client (`kube.py`), one verb per method: `apply` is server-side apply, a PATCH that creates what does not exist
  yet, and the API server authorizes such a create as `create`; `get`, `delete`; `patch_status` patches the
  status subresource; `create_event` creates Events;
- the informers (`informer.py`): they list and watch every child kind and the children's pods, which the pass then
  reads from the cache instead of asking the API server (and the pool Deployments' ReplicaSets, D143);
- kopf (`operator.py`): it lists and watches the DisaggDeployments, lists and watches CRDs to notice resources
  appearing, lists and watches namespaces when it is given a list of them, and creates Events of its own;
- the leader elector (`leader.py`), in the operator's own namespace only: it reads, creates and updates its Lease
  and records the handover as an Event on it;
- what the API server asks of whoever writes these objects: RBAC lets a subject grant only permissions it holds, so
  the operator must hold what the router's Role grants; and setting `blockOwnerDeletion` on a child (every owner
  reference does, `plan/build.py`) needs `update` on the owner's finalizers where the OwnerReferencesPermission-
  Enforcement admission plugin runs.

Nothing else is granted. tests/unit/reconcile/test_access.py holds the client and informer grants to the requests the
reconciler, the informers and the scaler really send, and the leader election grants to the elector's (every
request permitted, every such grant used), and e2e/rbac, the chart and manifests/ to these rules;
e2e/test_rbac.py checks the operator's ServiceAccount holds exactly them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disagg.names import (
    CHILD_KINDS,
    DEPLOYMENT,
    DISAGG_DEPLOYMENT,
    EVENT,
    LEADER_WORKER_SET,
    LEASE,
    POD,
    REPLICA_SET,
    Kind,
)
from disagg.plan.router import ROUTER_ROLE_RULES

Source = Literal["client", "informer", "kopf", "elector", "grants", "admission"]
VERB_ORDER = ("get", "list", "watch", "create", "patch", "update", "delete")


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    """The plural, with "/subresource" for a subresource."""
    verbs: tuple[str, ...]
    source: Source
    why: str
    cluster_scope: bool = False


def _grants(kinds: tuple[Kind, ...], verbs: tuple[str, ...], source: Source, why: str) -> list[Grant]:
    return [Grant(kind.group, kind.plural, verbs, source, why) for kind in kinds]


POOL_WORKLOAD_KINDS = (DEPLOYMENT, LEADER_WORKER_SET)
"""The kinds a pool runs as, whose replicas may belong to an autoscaler (`Reconciler._apply_child` reads them)."""

APPLY_VERBS = ("create", "patch")

NAMESPACED: tuple[Grant, ...] = (
    Grant(DISAGG_DEPLOYMENT.group, DISAGG_DEPLOYMENT.plural, ("list", "watch"), "kopf", "kopf watches them"),
    Grant(DISAGG_DEPLOYMENT.group, f"{DISAGG_DEPLOYMENT.plural}/status", ("patch",), "client", "Kube.patch_status"),
    *_grants(CHILD_KINDS, APPLY_VERBS, "client", "Kube.apply of every rendered child (Reconciler._apply)"),
    *_grants(CHILD_KINDS, ("list", "watch"), "informer", "the children's informers fill the cache (informer.py)"),
    *_grants(CHILD_KINDS, ("delete",), "client", "Kube.delete of children no longer wanted (Reconciler._prune)"),
    *_grants(
        CHILD_KINDS,
        ("get",),
        "client",
        "Kube.get of a desired child the cache does not hold as ours, to claim it (Reconciler._claim)",
    ),
    *_grants(POOL_WORKLOAD_KINDS, ("get",), "client", "Kube.get before a replicas hand-over (Reconciler._apply_child)"),
    Grant(
        POD.group,
        POD.plural,
        ("list", "watch"),
        "informer",
        "the pods' informer: status diagnostics, the scaler, the serving check",
    ),
    Grant(
        POD.group,
        f"{POD.plural}/status",
        ("patch",),
        "client",
        "Kube.patch_pod_condition: the serving readiness gate on engine pods (ServingChecker._admit)",
    ),
    Grant(
        POD.group,
        POD.plural,
        ("delete",),
        "client",
        "Kube.delete of an engine pod whose every pair fails (ServingChecker._remediate, Recreate)",
    ),
    Grant(
        REPLICA_SET.group,
        REPLICA_SET.plural,
        ("list", "watch"),
        "informer",
        "the ReplicaSets' informer: which pods are our workloads' (Reconciler._own_pods) and the pod templates to "
        "roll a stuck rollout back to (Reconciler._hold_templates)",
    ),
    Grant(EVENT.group, EVENT.plural, ("create",), "client", "Kube.create_event (and kopf's own events)"),
    *(
        Grant(group, resource, tuple(rule["verbs"]), "grants", "the router's Role grants it (plan/router.py)")
        for rule in ROUTER_ROLE_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ),
    Grant(
        DISAGG_DEPLOYMENT.group,
        f"{DISAGG_DEPLOYMENT.plural}/finalizers",
        ("update",),
        "admission",
        "children's owner references set blockOwnerDeletion (OwnerReferencesPermissionEnforcement)",
    ),
)

CLUSTER: tuple[Grant, ...] = (
    Grant(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        "kopf",
        "kopf's resource observer",
        cluster_scope=True,
    ),
)

LEADER_ELECTION: tuple[Grant, ...] = (
    Grant(LEASE.group, LEASE.plural, ("get", "create", "update"), "elector", "LeaderElector: get, create, replace"),
    Grant(EVENT.group, EVENT.plural, ("create",), "elector", "LeaderElector._announce: the handover, on the Lease"),
)
"""Granted only in the operator's own namespace, where its Lease lives (a Role there, in every mode)."""

NAMESPACE_MODE: tuple[Grant, ...] = (
    Grant("", "namespaces", ("list", "watch"), "kopf", "kopf's namespace observer", cluster_scope=True),
)
"""Needed only when the operator watches a list of namespaces (without it kopf retries for ~70 s, then assumes
they exist)."""


def rules(grants: tuple[Grant, ...]) -> list[dict[str, Any]]:
    """RBAC PolicyRules permitting exactly `grants`: verbs merged per resource, resources with the same verbs in
    one group joined into one rule, in the order the grants first name them."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for grant in grants:
        verbs.setdefault((grant.group, grant.resource), set()).update(grant.verbs)
    joined: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), held in verbs.items():
        ordered = tuple(verb for verb in VERB_ORDER if verb in held)
        joined.setdefault((group, ordered), []).append(resource)
    return [
        {"apiGroups": [group], "resources": resources, "verbs": list(ordered)}
        for (group, ordered), resources in joined.items()
    ]


def cluster_wide_rules() -> list[dict[str, Any]]:
    """The ClusterRole of an operator watching every namespace."""
    return rules(CLUSTER) + rules(NAMESPACED)


def leader_election_rules() -> list[dict[str, Any]]:
    """The Role in the operator's own namespace."""
    return rules(LEADER_ELECTION)


def permits(rule_list: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] for rule in rule_list
    )
