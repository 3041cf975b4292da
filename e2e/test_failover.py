"""High availability against the real API server: two operator replicas elect a leader on a Lease; killing the
leader in the middle of a burst hands over within the target, and everything converges once, with nothing
duplicated or lost; a leader that was paused past its lease does not write when it wakes up (decision D122).

Both replicas run as processes with the same ServiceAccount and exactly the documented RBAC (the cluster-wide
ClusterRole and the leader-election Role in the operator's namespace), as the chart's two pods do.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import (
    RBAC_DIR,
    REPO,
    OperatorProcess,
    children,
    install_crd,
    metric_value,
    token_kubeconfig,
)

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

HOME = "disagg-e2e-ha"
LEASE = "disagg-operator"
BURST = 60
FAILOVER_TARGET_S = 15.0
CHILDREN = 10  # 01-minimal: ServiceAccount, Role, RoleBinding, four Services, three Deployments
WRITES = ("PATCH", "POST", "PUT", "DELETE")


def idle_minimal(name: str) -> dict[str, Any]:
    """examples/01-minimal.yaml with every pool and the router at 0 replicas: all ten children, no GPUs needed."""
    document: dict[str, Any] = yaml.safe_load((REPO / "examples" / "01-minimal.yaml").read_text())
    document = copy.deepcopy(document)
    document["metadata"] = {"name": name}
    document["spec"]["prefill"]["replicas"] = 0
    document["spec"]["decode"]["replicas"] = 0
    document["spec"]["frontend"] = {"router": {"replicas": 0}}
    return document


class Replica(OperatorProcess):
    def __init__(self, kubeconfig: Path, directory: Path, identity: str) -> None:
        super().__init__(
            kubeconfig,
            directory / f"{identity}.log",
            "--leader-elect",
            f"--leader-election-namespace={HOME}",
            f"--leader-election-id={LEASE}",
            f"--leader-election-identity={identity}",
        )
        self.identity = identity

    def leading(self) -> bool:
        return metric_value(self.metrics(), "disagg_leader") == 1

    def writes(self) -> float:
        """Writes the reconcile workers sent to the API server (the elector's own Lease updates are not among them)."""
        text = self.metrics()
        codes = {
            line.split('code="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("disagg_kube_requests_total{")
        }
        return sum(
            metric_value(text, "disagg_kube_requests_total", method=method, code=code)
            for method in WRITES
            for code in codes
        )

    def passes(self) -> float:
        text = self.metrics()
        return sum(
            metric_value(text, "disagg_reconcile_duration_seconds_count", result=result)
            for result in ("ok", "degraded", "retry", "error")
        )


@pytest.fixture(scope="module")
def replicas(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    install_crd(kube_cluster)
    rbac = (
        (RBAC_DIR / "operator-clusterwide.yaml").read_text().replace("namespace: disagg-system", f"namespace: {HOME}")
    )
    rbac = rbac.replace("name: disagg-operator}", "name: disagg-e2e-ha}")
    kube_cluster.run("create", "namespace", HOME)
    kube_cluster.kubectl("apply", "-f", "-", stdin=rbac)
    token = kube_cluster.kubectl("create", "token", "disagg-operator", "-n", HOME, "--duration=6h").strip()
    directory = tmp_path_factory.mktemp("ha")
    kubeconfig = token_kubeconfig(kube_cluster, token, directory / "kubeconfig")
    started = [Replica(kubeconfig, directory, identity) for identity in ("op-a", "op-b")]
    for replica in started:
        replica.start()
    yield started
    for replica in started:
        if replica.process is not None and replica.process.poll() is None:
            os.killpg(replica.process.pid, signal.SIGCONT)
        replica.stop()
        print(f"{replica.identity} log tail:\n{replica.log_tail()}")
    kube_cluster.run("delete", "-f", "-", "--wait=false", stdin=rbac)
    kube_cluster.run("delete", "namespace", HOME, "--wait=false")


@pytest.fixture
def burst_namespace(kube_cluster: KubeCluster, replicas: list[Replica]) -> Iterator[str]:
    name = f"ha-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.run("delete", "namespace", name, "--timeout=180s")


def holder(kube: KubeCluster) -> str:
    lease = kube.get("lease", LEASE, "-n", HOME)
    return str(lease["spec"].get("holderIdentity") or "")


def leader_of(kube: KubeCluster, replicas: list[Replica]) -> tuple[Replica, Replica]:
    name = wait_for("a leader", lambda: holder(kube) or None, timeout=60)
    leader = next(r for r in replicas if r.identity == name)
    wait_for(f"{name} to reconcile as the leader", leader.leading, timeout=60)
    return leader, next(r for r in replicas if r is not leader)


def converged(kube: KubeCluster, namespace: str, names: list[str]) -> bool:
    items = kube.get("dd", "-n", namespace)["items"]
    done = {
        item["metadata"]["name"]
        for item in items
        if (item.get("status") or {}).get("observedGeneration") == 1 and (item.get("status") or {}).get("phase")
    }
    return done >= set(names)


def handovers(kube: KubeCluster) -> list[str]:
    events = kube.get(
        "events", "-n", HOME, "--field-selector", f"involvedObject.kind=Lease,involvedObject.name={LEASE}"
    )
    ordered = sorted(events["items"], key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")
    return [str(e["message"]) for e in ordered if e["reason"] == "LeaderElection"]


def test_killing_the_leader_mid_burst_hands_over_and_everything_converges_once(
    kube_cluster: KubeCluster, replicas: list[Replica], burst_namespace: str
) -> None:
    leader, standby = leader_of(kube_cluster, replicas)
    assert not standby.leading() and standby.passes() == 0  # the standby watches but never reconciles
    names = [f"dd-{index:03d}" for index in range(BURST)]
    burst = {"apiVersion": "v1", "kind": "List", "items": [idle_minimal(name) for name in names]}
    kube_cluster.kubectl("create", "-n", burst_namespace, "-f", "-", stdin=json.dumps(burst))
    wait_for("the leader's first passes", lambda: leader.passes() >= 3 or None, timeout=120, every=0.05)
    leader.kill()
    killed_at = time.monotonic()
    assert not converged(kube_cluster, burst_namespace, names), "the burst finished before the kill: nothing tested"

    wait_for("the standby to reconcile", lambda: standby.passes() > 0 or None, timeout=60, every=0.1)
    failover = time.monotonic() - killed_at
    assert standby.leading() and holder(kube_cluster) == standby.identity
    assert failover <= FAILOVER_TARGET_S, f"the new leader reconciled {failover:.1f}s after the kill"
    print(f"failover: the new leader's first pass {failover:.1f}s after the old leader's SIGKILL")

    wait_for("every DisaggDeployment to converge", lambda: converged(kube_cluster, burst_namespace, names), timeout=300)
    owners = {
        item["metadata"]["name"]: item["metadata"]["uid"]
        for item in kube_cluster.get("dd", "-n", burst_namespace)["items"]
    }
    for name in names:
        found = children(kube_cluster, burst_namespace, name)
        assert len(found) == CHILDREN, (name, sorted(found))
        for key, obj in found.items():
            references = obj["metadata"].get("ownerReferences") or []
            assert [ref["uid"] for ref in references] == [owners[name]], key
    deployments = kube_cluster.get("deployments", "-n", burst_namespace)["items"]
    replica_sets = kube_cluster.get("replicasets", "-n", burst_namespace)["items"]
    assert len(deployments) == 3 * BURST and len(replica_sets) == len(deployments)  # one revision each: no churn
    messages = handovers(kube_cluster)
    assert messages[-1] == f"{standby.identity} became leader, taking over from {leader.identity}", messages


def test_a_leader_paused_past_its_lease_does_not_write_when_it_wakes(
    kube_cluster: KubeCluster, replicas: list[Replica], burst_namespace: str
) -> None:
    for replica in replicas:
        if replica.process is None or replica.process.poll() is not None:
            replica.start()  # the one the previous test killed comes back as a standby
    leader, standby = leader_of(kube_cluster, replicas)
    names = ["paused-0", "paused-1"]
    burst = {"apiVersion": "v1", "kind": "List", "items": [idle_minimal(name) for name in names]}
    kube_cluster.kubectl("create", "-n", burst_namespace, "-f", "-", stdin=json.dumps(burst))
    wait_for("the leader to converge", lambda: converged(kube_cluster, burst_namespace, names), timeout=120)
    time.sleep(2)
    before = leader.writes()
    assert leader.process is not None
    os.killpg(leader.process.pid, signal.SIGSTOP)  # a frozen VM, a long GC pause, a stopped container
    try:
        wait_for("the standby to take the Lease", lambda: holder(kube_cluster) == standby.identity or None, timeout=60)
        wait_for("the new leader to reconcile", standby.leading, timeout=30)
        # Work the paused leader will see when it wakes: its watch delivers these changes and its queue holds them.
        for name in names:
            kube_cluster.kubectl("label", "dd", name, "-n", burst_namespace, "touched=1")
            kube_cluster.kubectl("delete", "service", f"{name}-router", "-n", burst_namespace)
    finally:
        os.killpg(leader.process.pid, signal.SIGCONT)
    wait_for("the woken replica to know it lost the Lease", lambda: not leader.leading() or None, timeout=30)
    wait_for(
        "the new leader to restore the deleted Services",
        lambda: all(("Service", f"{n}-router") in children(kube_cluster, burst_namespace, n) for n in names) or None,
        timeout=60,
    )
    time.sleep(5)
    assert leader.writes() == before, "the paused leader wrote after it woke up"
    assert holder(kube_cluster) == standby.identity
    assert "lost the lease" in leader.log_path.read_text()
