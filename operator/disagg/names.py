"""Names the operator, its users and the cluster agree on: the API, the pools, child names, labels and kinds.

The lowest floor of the house: it imports nothing from `disagg`, and every layer above takes these spellings from
here instead of writing them again. Selectors use only the stable labels, never the image or a revision hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# -- the DisaggDeployment API -----------------------------------------------------------------------------------

GROUP = "disagg.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DisaggDeployment"
PLURAL = "disaggdeployments"
SINGULAR = "disaggdeployment"
SHORT_NAMES = ("dd", "disagg")

# -- pools and the roles of children ----------------------------------------------------------------------------

PoolName = Literal["prefill", "decode"]
POOLS: tuple[PoolName, PoolName] = ("prefill", "decode")
Role = Literal["prefill", "decode", "router", "render", "kv-store", "kv-node"]
"""The role of a child: one of the pools, the router, the GPU-less render tier, the KV store, or the KV daemons that
run on every engine node (a standalone Mooncake client, a PegaFlow server)."""

# -- labels, annotations and environment variables other programs read ---------------------------------------

MANAGED_BY = "disagg-operator"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_DEPLOYMENT = "disagg.dev/deployment"
LABEL_ROLE = "disagg.dev/role"

LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""LeaderWorkerSet sets this on every pod of a group: 0 on the leader, 1.. on the workers."""
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
"""LeaderWorkerSet sets this to one value per group (replica), shared by its leader and workers."""
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
"""Variables LeaderWorkerSet's pod webhook injects into every container of a group."""

SERVING_GATE = "disagg.dev/serving"
"""The readiness gate of engine pods when the serving check enforces (and the pod condition the operator sets): a
pod becomes Ready only once the operator has seen a pair through it serve (docs/decisions.md, D102)."""
FRONTEND_ADMIN_PORT = "admin"
"""The name of the operator's frontend's admin port (docs/frontend.md): probes, drains and the pair list. A router
container with a port of this name is recognised as the operator's frontend, whose pairs the serving check probes."""

BOOTSTRAP_PORT_ANNOTATION = "vllm.ai/bootstrap-port"
"""vllm-router reads the Mooncake bootstrap port of a discovered prefill pod from this fixed annotation."""

POOL_HOST_ENV: dict[PoolName, str] = {"prefill": "DISAGG_PREFILL_HOST", "decode": "DISAGG_DECODE_HOST"}
"""Variables holding the pools' Service names in engine and router containers, usable as $(VAR) in args."""

_APP_NAME: dict[Role, str] = {
    "prefill": "vllm",
    "decode": "vllm",
    "router": "vllm-router",
    "render": "vllm-render",
    "kv-store": "kv-store",
    "kv-node": "kv-node",
}

# -- child names and selectors ----------------------------------------------------------------------------------


def child_name(deployment: str, role: Role) -> str:
    """`<name>-prefill`, `<name>-router`, ...: the workload (and, for the router, render tier and KV store, its
    Service) of one role."""
    return f"{deployment}-{role}"


def pool_service_name(deployment: str, role: PoolName) -> str:
    """The headless Service in front of a pool's API pods (a LeaderWorkerSet owns `<name>-<role>` itself)."""
    return f"{deployment}-{role}-pool"


def kv_config_name(deployment: str) -> str:
    return f"{deployment}-kv-config"


def child_names(deployment: str) -> tuple[str, ...]:
    """Every name a child of `deployment` can take: its own (the user-facing Service) and the suffixed ones."""
    roles: tuple[Role, ...] = ("prefill", "decode", "router", "render", "kv-store", "kv-node")
    return (
        deployment,
        *(child_name(deployment, role) for role in roles),
        *(pool_service_name(deployment, pool) for pool in POOLS),
        kv_config_name(deployment),
    )


CHILD_NAME_SUFFIXES: tuple[str, ...] = tuple(sorted(name[1:] for name in child_names("x")[1:]))
"""`-decode`, `-decode-pool`, ...: a DisaggDeployment name may not end with one (D71). Then two DisaggDeployments
in one namespace can never name a child alike: `a` + suffix = `b` would make `b` end with a suffix, and `a` + s =
`b` + t (s != t) would need one suffix to end with another, which none does (tests/unit/test_names.py)."""


def selector_labels(deployment: str, role: Role) -> dict[str, str]:
    """The labels that select every pod of a role: stable across revisions."""
    return {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role}


def api_pod_selector(deployment: str, role: PoolName, multi_node: bool) -> dict[str, str]:
    """The labels that select a pool's API pods: workers of multi-node replicas run headless and serve no HTTP."""
    selector = selector_labels(deployment, role)
    if multi_node:
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    return selector


def common_labels(deployment: str, role: Role, app_name: str | None = None) -> dict[str, str]:
    """Every child carries these; they sort deterministically."""
    return {
        LABEL_NAME: app_name or _APP_NAME[role],
        LABEL_INSTANCE: deployment,
        LABEL_COMPONENT: role,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: deployment,
        LABEL_ROLE: role,
    }


def children_selector(deployment: str) -> str:
    """The label selector (query syntax) matching every child of one DisaggDeployment."""
    return f"{LABEL_DEPLOYMENT}={deployment},{LABEL_MANAGED_BY}={MANAGED_BY}"


# -- kinds ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """Everything about one kind the operator touches: its apiVersion and its REST plural."""

    name: str
    api_version: str
    plural: str
    missing_hint: str | None = None
    """What to tell users when the API server does not serve this kind (a CRD that is not installed)."""

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def resource(self) -> str:
        """The plural qualified by the group, as kubectl, kr8s and the API server's messages spell it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


SERVICE_ACCOUNT = Kind("ServiceAccount", "v1", "serviceaccounts")
ROLE = Kind("Role", "rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDING = Kind("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings")
CONFIG_MAP = Kind("ConfigMap", "v1", "configmaps")
SERVICE = Kind("Service", "v1", "services")
DEPLOYMENT = Kind("Deployment", "apps/v1", "deployments")
DAEMON_SET = Kind("DaemonSet", "apps/v1", "daemonsets")
LEADER_WORKER_SET = Kind(
    "LeaderWorkerSet",
    "leaderworkerset.x-k8s.io/v1",
    "leaderworkersets",
    missing_hint="LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) is not installed, and a pool with nodesPerReplica > 1 "
    "needs it: install LeaderWorkerSet v0.6 or newer (https://lws.sigs.k8s.io), or use nodesPerReplica 1",
)
POD = Kind("Pod", "v1", "pods")
REPLICA_SET = Kind("ReplicaSet", "apps/v1", "replicasets")
"""Read only: where a rollback finds the pod template of the revision it goes back to."""
EVENT = Kind("Event", "v1", "events")
LEASE = Kind("Lease", "coordination.k8s.io/v1", "leases")
"""The leader-election lock of the operator's replicas (in the operator's own namespace, never a user's)."""
DISAGG_DEPLOYMENT = Kind(KIND, API_VERSION, PLURAL)

CHILD_KINDS: tuple[Kind, ...] = (
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    CONFIG_MAP,
    SERVICE,
    DEPLOYMENT,
    DAEMON_SET,
    LEADER_WORKER_SET,
)
"""Every kind the operator creates, in apply order (identities and configuration before the pods that use them).
Only these are watched, listed and ever pruned."""

FIRST_WAVE: frozenset[str] = frozenset({SERVICE_ACCOUNT.name, ROLE.name, CONFIG_MAP.name, SERVICE.name})
"""Children that others name, applied (concurrently) before every other child, which then go concurrently: pods
name their ServiceAccount and ConfigMaps (a pod naming a missing ServiceAccount is refused, so its workload backs
off), and RBAC refuses a RoleBinding whose Role does not exist yet (its escalation check reads the Role). A kind
not listed, including one added later, waits for these."""

KINDS: dict[str, Kind] = {kind.name: kind for kind in (*CHILD_KINDS, POD, REPLICA_SET, EVENT, LEASE, DISAGG_DEPLOYMENT)}
"""Every kind the operator reads or writes, by name."""
