"""The operator's RBAC (reconcile/access.py) against what its code really sends: scenarios that exercise every
client call (create every child kind, hand replicas over, scale, prune every child kind, report status and events)
run against the fake API server, which records each request as the verb RBAC authorizes it as. Every request must
be permitted, and every grant the access table puts down to the client must have been used. The hand-kept copies
of the rules (e2e/rbac, the chart, manifests/install.yaml) must equal the derived ones."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from disagg.api.validate import validate_deployment
from disagg.metrics_sources.direct import DirectSource
from disagg.names import CHILD_KINDS, FIRST_WAVE
from disagg.reconcile.access import (
    CLUSTER,
    LEADER_ELECTION,
    NAMESPACE_MODE,
    NAMESPACED,
    cluster_wide_rules,
    leader_election_rules,
    permits,
    rules,
)
from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.kube import Kube, Response
from disagg.reconcile.leader import LeaderElector, LeaseConfig
from disagg.render import render_deployment
from tests.conftest import EXAMPLES, REPO
from tests.support.engines import EnginePods
from tests.support.fake_kube import ApiError, FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness
from tests.support.rendering import example_deployment
from tests.support.serving import checked_harness, create_pod, kubelet
from tests.unit.reconcile.test_pass_serving import FRONTEND

Access = tuple[str, str, str]
"""(API group, resource[/subresource], verb)."""


class Recording(FakeApiServer):
    """The fake API server, noting each request as RBAC sees it: GET of a name is get, of a collection list, and
    watch with watch=1; an apply is patch, and create too when it creates the object; POST is create; PUT is update;
    DELETE is delete."""

    def __init__(self) -> None:
        super().__init__(namespaces=(NAMESPACE,))
        self.accesses: set[Access] = set()

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        try:
            kind, namespace, name, subresource = self._route(path)
        except (ApiError, Exception):
            return await super().request(method, path, query, body, content_type)
        resource = kind.plural + (f"/{subresource}" if subresource else "")
        verbs = {
            "GET": ["get" if name else "list"],
            "POST": ["create"],
            "PUT": ["update"],
            "DELETE": ["delete"],
            "PATCH": ["patch"],
        }
        noted = verbs[method]
        if (
            method == "PATCH"
            and subresource is None
            and namespace
            and name
            and not self.get(kind.name, namespace, name)
        ):
            noted = [*noted, "create"]  # server-side apply of an object that does not exist is authorized as create
        self.accesses |= {(kind.group, resource, verb) for verb in noted}
        return await super().request(method, path, query, body, content_type)

    async def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        kind, _, _, _ = self._route(path)
        self.accesses.add((kind.group, kind.plural, "watch"))
        async for event in super().watch(path, query):
            yield event


async def scenario_accesses() -> set[Access]:
    """Everything one operator does over a lifetime of DisaggDeployments, as RBAC sees it."""
    server = Recording()
    # Every child kind, including LeaderWorkerSets, a KV store's ConfigMap and DaemonSet; an autoscaled multi-node pool.
    store = deployment_document(REPO / "examples" / "06-mooncake-store-agentic.yaml")
    store["spec"]["decode"]["autoscaling"] = {"enabled": True, "controller": "external"}
    # A standalone store: its per-node client is a DaemonSet.
    mooncake = store["spec"]["kvCache"]["store"]["mooncake"]
    mooncake.pop("globalSegmentSize")
    mooncake.update(mode="standalone", client={"segmentSize": "64Gi"})
    h = harness(store, server)
    await h.reconcile()
    await h.reconcile()  # the replicas hand-over reads the LeaderWorkerSet
    # The same again under another name, whose first-wave names are taken by objects the watch cache does not
    # show: their create-only applies are refused, and each is read to claim it (D191).
    taken = copy.deepcopy(store)
    taken["metadata"]["name"] = "t"
    validated = validate_deployment(taken).deployment
    assert validated is not None
    for obj in render_deployment(validated, NAMESPACE):
        if obj["kind"] in FIRST_WAVE:
            obj["metadata"] = {"name": obj["metadata"]["name"], "namespace": NAMESPACE}
            server.create(obj, manager="someone-else")
    await harness(taken, server).reconcile()

    # Prune every child kind: no store (ConfigMap, its Deployment and Service), single-node pools (the
    # LeaderWorkerSet goes), a custom router (the router's ServiceAccount, Role and RoleBinding go).
    def shrink(spec: dict[str, Any]) -> None:
        spec.pop("kvCache", None)
        spec["decode"] = {"replicas": 1, "tensorParallel": 8}
        spec["frontend"] = {"router": {"customContainer": {"image": "router:1"}}}

    h.edit_spec(shrink)
    await h.reconcile()
    pruned = {kind for kind, _ in h.children()}
    assert not {"ConfigMap", "LeaderWorkerSet", "Role", "RoleBinding", "ServiceAccount"} & pruned
    # An operator-scaled Deployment pool: the hand-over reads it, the scaler lists pods and writes replicas.
    scaled_document = deployment_document(MINIMAL, name="s")
    scaled_document["spec"]["decode"] = {"replicas": 1, "autoscaling": {"enabled": True, "maxReplicas": 4}}
    scaled_document["spec"]["scaling"] = {"slo": {"itlP90": "25ms"}, "interval": "15s"}
    scaled = harness(scaled_document, server)
    now = [1000.0]
    async with EnginePods(server, NAMESPACE, lambda: now[0]) as pods:
        autoscaler = Autoscaler(scaled.reconciler.kube, wall_clock=lambda: now[0])
        autoscaler.direct = DirectSource(port=pods.port)
        scaled.reconciler.autoscaler = autoscaler
        pods.loads["decode"].sequences = 100
        for _ in range(4):
            await scaled.reconcile()
            await pods.sync()
            now[0] += 15
        await autoscaler.close()
    assert scaled.events("ScaledUp")  # the scaler did write replicas
    await serving_scenario(server)
    return server.accesses


async def serving_scenario(server: FakeApiServer) -> None:
    """The serving check admits engines (pods/status), recreates one whose pairs fail (pods delete) and rolls a
    stuck rollout back (replicasets list)."""
    document = deployment_document(FRONTEND.replace("name: m", "name: v"))
    document["spec"]["serving"] = {
        "check": {"failureThreshold": 1},
        "rollout": {"progressDeadline": "1m", "onStuck": "Rollback"},
    }
    h, frontend, clock = checked_harness(document, server)
    await h.reconcile()
    for name, role in (("v-prefill-a", "prefill"), ("v-decode-a", "decode")):
        create_pod(server, "v", name, role, gated=True, revision="old")
    create_pod(server, "v", "v-router-a", "router", ip="10.9.0.1")
    h.settle()
    await h.reconcile()
    kubelet(server)
    for name, role in (("v-prefill-b", "prefill"), ("v-decode-b", "decode")):
        create_pod(server, "v", name, role, gated=True)
    frontend.behaviour = lambda p, d: p.endswith("a") and d.endswith("a")
    for _ in range(9):
        clock.now += 10
        await h.reconcile()
    assert h.status["rollout"]["state"] == "RolledBack"
    for name in ("v-prefill-b", "v-decode-b"):  # what the Deployments do once their templates are rolled back
        server.remove("Pod", NAMESPACE, name)
    frontend.behaviour = lambda p, d: False
    for _ in range(3):
        clock.now += 10
        await h.reconcile()
    assert h.events("RecreatedEngine")


@pytest.fixture(scope="module")
def accesses() -> set[Access]:
    return asyncio.run(scenario_accesses())


def test_every_request_the_operator_sends_is_permitted(accesses: set[Access]) -> None:
    granted = cluster_wide_rules()
    refused = sorted(access for access in accesses if not permits(granted, *access))
    assert not refused, f"requests reconcile/access.py does not grant: {refused}"


def test_every_grant_put_down_to_the_client_and_the_informers_is_used(accesses: set[Access]) -> None:
    claimed = {
        (g.group, g.resource, verb) for g in NAMESPACED if g.source in ("client", "informer") for verb in g.verbs
    }
    unused = sorted(claimed - accesses)
    assert not unused, f"reconcile/access.py grants the client and the informers what they never ask for: {unused}"


async def election_accesses() -> set[Access]:
    """A replica taking a Lease nobody holds, renewing it, releasing it; another taking it over from a holder that
    stopped renewing (through every branch of the elector's calls)."""
    server = Recording()
    now = [0.0]
    first = LeaderElector(Kube(server), LeaseConfig(NAMESPACE, "op", "a"), clock=lambda: now[0])
    second = LeaderElector(Kube(server), LeaseConfig(NAMESPACE, "op", "b"), clock=lambda: now[0])
    stop = asyncio.Event()
    assert await first.acquire(stop)
    assert not await second._try()  # held, and renewed just now
    assert await first._try()  # a renewal
    now[0] += 60  # the holder stops renewing
    assert not await second._try()  # the record has not changed since it was seen: wait a whole lease from here
    now[0] += 60
    assert await second.acquire(stop)
    await second.release()
    return server.accesses


def test_the_leader_election_grants_are_exactly_what_the_elector_uses() -> None:
    used = asyncio.run(election_accesses())
    granted = leader_election_rules()
    assert all(permits(granted, *access) for access in used), used
    claimed = {(g.group, g.resource, verb) for g in LEADER_ELECTION for verb in g.verbs}
    assert claimed == used


def test_the_operator_holds_everything_the_roles_it_renders_grant() -> None:
    granted = cluster_wide_rules()
    for path in EXAMPLES:
        for obj in render_deployment(example_deployment(path), "ns"):
            if obj["kind"] != "Role":
                continue
            for rule in obj["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            assert permits(granted, group, resource, verb), (path.name, group, resource, verb)


def test_owner_references_block_deletion_so_the_finalizers_grant_stays() -> None:
    document = deployment_document(MINIMAL)
    document["metadata"]["uid"] = "u-1"
    deployment = validate_deployment(document).deployment
    assert deployment is not None
    references = [ref for obj in render_deployment(deployment, "ns") for ref in obj["metadata"]["ownerReferences"]]
    assert references and all(ref["blockOwnerDeletion"] for ref in references)
    assert permits(cluster_wide_rules(), "disagg.dev", "disaggdeployments/finalizers", "update")


def test_the_child_kinds_are_exactly_the_kinds_granted_to_apply() -> None:
    applied = {(g.group, g.resource) for g in NAMESPACED if "patch" in g.verbs and "/" not in g.resource}
    assert applied == {(kind.group, kind.plural) for kind in CHILD_KINDS}


def _documented(kind: str) -> list[dict[str, Any]]:
    for document in yaml.safe_load_all((REPO / "e2e" / "rbac" / "operator-clusterwide.yaml").read_text()):
        if document["kind"] == kind:
            return list(document["rules"])
    raise AssertionError(f"no {kind} in e2e/rbac/operator-clusterwide.yaml")


def _chart_block(name: str) -> list[dict[str, Any]]:
    text = (REPO / "charts" / "disagg-operator" / "templates" / "_helpers.tpl").read_text()
    found = re.search(r'\{\{- define "disagg-operator\.' + name + r'" -\}\}\n(.*?)\{\{- end \}\}', text, re.DOTALL)
    assert found, name
    loaded: list[dict[str, Any]] = yaml.safe_load(found.group(1))
    return loaded


def test_e2e_rbac_is_the_derived_cluster_role() -> None:
    assert _documented("ClusterRole") == cluster_wide_rules(), yaml.safe_dump(cluster_wide_rules())
    assert _documented("Role") == leader_election_rules(), yaml.safe_dump(leader_election_rules())


def test_the_charts_rules_are_the_derived_ones() -> None:
    assert _chart_block("namespacedRules") == rules(NAMESPACED)
    assert _chart_block("clusterRules") == rules(CLUSTER)
    assert _chart_block("leaderElectionRules") == leader_election_rules()
    rbac = (REPO / "charts" / "disagg-operator" / "templates" / "rbac.yaml").read_text()
    namespace_rule = rules(NAMESPACE_MODE)[0]
    assert (
        f"resources: [{', '.join(namespace_rule['resources'])}]\n    verbs: [{', '.join(namespace_rule['verbs'])}]"
        in rbac
    )
