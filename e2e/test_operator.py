"""The operator against a real API server: apply, adopt, prune, drift repair, honest status, restarts, isolation."""

from __future__ import annotations

import copy
import json
import select
import subprocess
import sys
from typing import Any

import pytest
import yaml

from disagg.names import CHILD_KINDS
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import (
    REPO,
    OperatorProcess,
    children,
    condition,
    metric_value,
    status_of,
    wait_phase,
    with_test_images,
)
from e2e.prerequisites import unavailable

pytestmark = pytest.mark.e2e
EXAMPLES = REPO / "examples"


def example(stem: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{stem}.yaml").read_text())
    return with_test_images(document)


def apply(kube: KubeCluster, namespace: str, document: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))


def rendered(namespace: str, stem: str) -> list[dict[str, Any]]:
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "disagg.cli",
            "render",
            "-n",
            namespace,
            "-o",
            "json",
            "-f",
            str(EXAMPLES / f"{stem}.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    items: list[dict[str, Any]] = json.loads(text)["items"]
    return items


def test_create_makes_every_child_with_owner_reference_and_labels(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("01-minimal"))
    status = wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    owner_uid = kube_cluster.get("dd", "qwen3-32b", "-n", namespace)["metadata"]["uid"]
    expected = {(obj["kind"], obj["metadata"]["name"]) for obj in rendered(namespace, "01-minimal")}
    found = children(kube_cluster, namespace, "qwen3-32b")
    assert set(found) == expected
    for obj in found.values():
        refs = obj["metadata"]["ownerReferences"]
        assert [(ref["uid"], ref["controller"]) for ref in refs] == [(owner_uid, True)]
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "disagg-operator"
        assert labels["app.kubernetes.io/instance"] == "qwen3-32b"
    assert status["prefillReady"] == "2/2" and status["decodeReady"] == "1/1"
    assert status["observedGeneration"] == 1
    assert status["endpoint"] == f"http://qwen3-32b.{namespace}.svc:8000"
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "SpecValid")["status"] == "True"
    events = kube_cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=qwen3-32b")
    reasons = {event["reason"] for event in events["items"]}
    assert {"Created", "Ready"} <= reasons


def test_kubectl_shows_descriptions_columns_and_short_names(kube_cluster: KubeCluster, namespace: str) -> None:
    # The API server publishes the CRD's schema to OpenAPI v3 shortly after it is Established.
    explained = wait_for(
        "kubectl explain to know the CRD",
        lambda: (
            proc.stdout
            if (proc := kube_cluster.run("explain", "disaggdeployments.spec.prefill.tensorParallel")).returncode == 0
            else None
        ),
    )
    assert "Tensor-parallel size (vLLM --tensor-parallel-size)." in explained
    assert "integer" in explained
    apply(kube_cluster, namespace, example("01-minimal"))
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    endpoint = f"http://qwen3-32b.{namespace}.svc:8000"
    for short_name in ("dd", "disagg"):
        header, row = kube_cluster.kubectl("get", short_name, "-n", namespace).splitlines()
        assert header.split() == ["NAME", "PREFILL", "DECODE", "PHASE", "SERVING", "ENDPOINT", "AGE"]
        # kwok's pods run no engine, so the operator here runs with --serving-check Off (D108): Serving is Unknown.
        assert row.split()[:6] == ["qwen3-32b", "2/2", "1/1", "Ready", "Unknown", endpoint]
    header, row = kube_cluster.kubectl("get", "dd", "-n", namespace, "-o", "wide").splitlines()
    assert header.split() == ["NAME", "PREFILL", "DECODE", "PHASE", "SERVING", "ENDPOINT", "MODEL", "AGE"]
    assert row.split()[:7] == ["qwen3-32b", "2/2", "1/1", "Ready", "Unknown", endpoint, "Qwen/Qwen3-32B"]


def test_gpu_pods_land_on_nodes_of_the_requested_vendor(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("05-moriio-mi300x-single-node"))
    wait_phase(kube_cluster, namespace, "qwen3-235b-moriio", "Ready")
    pods = kube_cluster.get("pods", "-n", namespace, "-l", "disagg.dev/deployment=qwen3-235b-moriio")["items"]
    nodes = {node["metadata"]["name"]: node for node in kube_cluster.get("nodes")["items"]}
    engines = [pod for pod in pods if pod["metadata"]["labels"]["disagg.dev/role"] in ("prefill", "decode")]
    assert len(engines) == 2
    for pod in engines:
        node = nodes[pod["spec"]["nodeName"]]
        assert node["metadata"]["labels"].get("amd.com/gpu.present") == "true"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "4"


def test_spec_change_changes_those_children_and_nothing_else(kube_cluster: KubeCluster, namespace: str) -> None:
    document = example("01-minimal")
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    before = {
        key: obj["metadata"]["resourceVersion"] for key, obj in children(kube_cluster, namespace, "qwen3-32b").items()
    }
    changed = copy.deepcopy(document)
    changed["spec"]["decode"]["replicas"] = 2
    apply(kube_cluster, namespace, changed)
    wait_for(
        "decode to have 2 ready replicas",
        lambda: status_of(kube_cluster, namespace, "qwen3-32b").get("decodeReady") == "2/2",
    )
    status = wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    assert status["observedGeneration"] == 2
    after = children(kube_cluster, namespace, "qwen3-32b")
    assert after[("Deployment", "qwen3-32b-decode")]["spec"]["replicas"] == 2
    untouched = {key for key in before if key != ("Deployment", "qwen3-32b-decode")}
    assert {key: after[key]["metadata"]["resourceVersion"] for key in untouched} == {
        key: before[key] for key in untouched
    }


def test_a_child_deleted_by_hand_is_recreated(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("01-minimal"))
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    old_uid = kube_cluster.get("service", "qwen3-32b", "-n", namespace)["metadata"]["uid"]
    kube_cluster.kubectl("delete", "service", "qwen3-32b", "-n", namespace)
    kube_cluster.kubectl("delete", "deployment", "qwen3-32b-router", "-n", namespace)
    wait_for(
        "the Service to come back",
        lambda: kube_cluster.run("get", "service", "qwen3-32b", "-n", namespace).returncode == 0,
        timeout=60,
    )
    assert kube_cluster.get("service", "qwen3-32b", "-n", namespace)["metadata"]["uid"] != old_uid
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    assert ("Deployment", "qwen3-32b-router") in children(kube_cluster, namespace, "qwen3-32b")


def test_a_child_edited_by_hand_is_reverted(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("01-minimal"))
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    kube_cluster.kubectl("scale", "deployment", "qwen3-32b-prefill", "--replicas=5", "-n", namespace)
    kube_cluster.kubectl(
        "patch",
        "service",
        "qwen3-32b",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"selector": {"disagg.dev/role": "decode"}}}),
    )
    kube_cluster.kubectl("annotate", "service", "qwen3-32b", "-n", namespace, "team=inference")

    def reverted() -> bool:
        prefill = kube_cluster.get("deployment", "qwen3-32b-prefill", "-n", namespace)
        service = kube_cluster.get("service", "qwen3-32b", "-n", namespace)
        return bool(prefill["spec"]["replicas"] == 2 and service["spec"]["selector"]["disagg.dev/role"] == "router")

    wait_for("hand edits to be reverted", reverted, timeout=60)
    service = kube_cluster.get("service", "qwen3-32b", "-n", namespace)
    assert service["metadata"]["annotations"]["team"] == "inference"  # a field we never set is left alone


def test_deleting_the_deployment_garbage_collects_every_child(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("06-mooncake-store-agentic"))
    wait_phase(kube_cluster, namespace, "kimi-agentic", "Ready")
    assert children(kube_cluster, namespace, "kimi-agentic")
    kube_cluster.kubectl("delete", "dd", "kimi-agentic", "-n", namespace, "--timeout=60s")
    wait_for(
        "every child to be garbage-collected", lambda: not children(kube_cluster, namespace, "kimi-agentic"), timeout=90
    )


def test_invalid_spec_is_reported_and_leaves_children_untouched(kube_cluster: KubeCluster, namespace: str) -> None:
    document = example("01-minimal")
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    before = {
        key: obj["metadata"]["resourceVersion"] for key, obj in children(kube_cluster, namespace, "qwen3-32b").items()
    }
    broken = copy.deepcopy(document)
    broken["spec"]["decode"]["engine"] = {"kvCacheDtype": "fp8"}  # CEL cannot see it; the operator's rules can
    broken["spec"]["prefill"]["replicas"] = 0
    apply(kube_cluster, namespace, broken)
    status = wait_phase(kube_cluster, namespace, "qwen3-32b", "Invalid")
    spec_valid = condition(status, "SpecValid")
    assert spec_valid["status"] == "False"
    assert "spec.decode.engine.kvCacheDtype" in spec_valid["message"] and "Fix:" in spec_valid["message"]
    assert status["observedGeneration"] == 2
    wait_for(
        "the InvalidSpec event",
        lambda: any(
            event["reason"] == "InvalidSpec"
            for event in kube_cluster.get(
                "events", "-n", namespace, "--field-selector", "involvedObject.name=qwen3-32b"
            )["items"]
        ),
    )
    after = children(kube_cluster, namespace, "qwen3-32b")
    assert {key: obj["metadata"]["resourceVersion"] for key, obj in after.items()} == before
    assert after[("Deployment", "qwen3-32b-prefill")]["spec"]["replicas"] == 2  # nothing scaled down by a typo
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")


def test_a_spec_above_4_kb_applied_with_plain_kubectl_apply_becomes_ready(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    """D74, as the README applies examples: client-side `kubectl apply` stores the whole object in the
    last-applied-configuration annotation, which a 4096-character cap on annotation values made Invalid."""
    document = example("01-minimal")
    document["spec"]["decode"]["podAnnotations"] = {f"example.com/note-{i}": "n" * 900 for i in range(6)}
    apply(kube_cluster, namespace, document)  # plain `kubectl apply`, no --server-side
    status = wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    assert status["observedGeneration"] == 1
    live = kube_cluster.get("disaggdeployment", "qwen3-32b", "-n", namespace)
    assert len(live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]) > 4096


def test_a_name_taken_by_an_object_it_did_not_create_is_reported_and_never_written(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    """D70: a DisaggDeployment named after someone's Service does not take it over, nor does deleting it delete
    the Service; renamed, it deploys."""
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "qwen3-32b", "namespace": namespace, "labels": {"team": "payments"}},
        "spec": {"selector": {"app": "payments"}, "ports": [{"name": "http", "port": 80}]},
    }
    kube_cluster.kubectl("create", "-f", "-", stdin=json.dumps(foreign))
    before = kube_cluster.get("service", "qwen3-32b", "-n", namespace)
    apply(kube_cluster, namespace, example("01-minimal"))
    status = wait_phase(kube_cluster, namespace, "qwen3-32b", "Degraded")
    degraded = condition(status, "Degraded")
    assert degraded["reason"] == "NameConflict", degraded
    assert "Service qwen3-32b" in degraded["message"] and "rename" in degraded["message"]
    wait_for(
        "the NameConflict event",
        lambda: any(
            event["reason"] == "NameConflict" and "Service qwen3-32b" in event["message"]
            for event in kube_cluster.get(
                "events", "-n", namespace, "--field-selector", "involvedObject.name=qwen3-32b"
            )["items"]
        ),
    )
    # The first wave is created create-only (D191): what was created before the taken name answered 409 stays, owned
    # by the DisaggDeployment; nothing that runs or binds (the second wave, read first) is applied.
    made = children(kube_cluster, namespace, "qwen3-32b")
    assert {kind for kind, _ in made} <= {"ServiceAccount", "Role", "ConfigMap", "Service"}, sorted(made)
    for obj in made.values():
        owners = obj["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"]) for o in owners] == [("DisaggDeployment", "qwen3-32b")], obj["metadata"]
    after = kube_cluster.get("service", "qwen3-32b", "-n", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not after["metadata"].get("ownerReferences")
    kube_cluster.kubectl("delete", "disaggdeployment", "qwen3-32b", "-n", namespace, "--wait=true")
    renamed = example("01-minimal")
    renamed["metadata"]["name"] = "qwen3-32b-v2"
    apply(kube_cluster, namespace, renamed)
    wait_phase(kube_cluster, namespace, "qwen3-32b-v2", "Ready")
    kept = kube_cluster.get("service", "qwen3-32b", "-n", namespace)
    assert kept["metadata"]["uid"] == before["metadata"]["uid"]
    assert kept["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_api_server_refuses_specs_that_break_cel_rules(kube_cluster: KubeCluster, namespace: str) -> None:
    bad = example("01-minimal")
    bad["spec"]["decode"]["tensorParallel"] = 6
    refused = kube_cluster.run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(bad))
    assert refused.returncode != 0
    assert "heterogeneous TP needs the larger tensorParallel to be a multiple of the smaller one" in refused.stderr
    assert "spec.decode.tensorParallel" in refused.stderr
    typo = example("01-minimal")
    typo["spec"]["decode"]["tensorParalel"] = 8
    refused = kube_cluster.run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(typo))
    assert refused.returncode != 0 and 'unknown field "spec.decode.tensorParalel"' in refused.stderr
    two_sources = example("01-minimal")
    two_sources["spec"]["decode"]["resources"] = {
        "claims": [{"name": "nvlink", "resourceClaimTemplateName": "channel", "resourceClaimName": "shared"}]
    }
    refused = kube_cluster.run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(two_sources))
    assert refused.returncode != 0
    assert "exactly one of resourceClaimTemplateName or resourceClaimName" in refused.stderr
    same_name = example("01-minimal")
    same_name["spec"]["decode"]["resources"] = {
        "claims": [
            {"name": "nvlink", "resourceClaimTemplateName": "channel"},
            {"name": "nvlink", "resourceClaimName": "shared"},
        ]
    }
    refused = kube_cluster.run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(same_name))
    assert refused.returncode != 0 and "spec.decode.resources.claims[1]: Duplicate value" in refused.stderr


def test_status_is_ready_only_when_both_pools_and_the_router_are(kube_cluster: KubeCluster, namespace: str) -> None:
    label = f"e2e-{namespace}"
    document = example("01-minimal")
    document["spec"]["decode"]["scheduling"] = {"nodeSelector": {label: "yes"}}
    apply(kube_cluster, namespace, document)

    def blocked() -> dict[str, Any] | None:
        # The scheduler marks the decode pod unschedulable some time after the pod exists; the status explains it
        # from the next pass on. Wait for that, not just for prefill.
        found = status_of(kube_cluster, namespace, "qwen3-32b")
        progressing = condition(found, "Progressing")
        explained = progressing.get("reason") == "PodsNotRunning" and "unschedulable" in progressing.get("message", "")
        return found if found.get("prefillReady") == "2/2" and explained else None

    status = wait_for("decode to be reported unschedulable", blocked, timeout=90)
    assert status["phase"] in ("Progressing", "Pending")
    assert condition(status, "Ready")["status"] == "False"
    progressing = condition(status, "Progressing")
    assert progressing["reason"] == "PodsNotRunning" and "unschedulable" in progressing["message"]
    node = _free_nvidia_node(kube_cluster)
    kube_cluster.kubectl("label", "node", node, f"{label}=yes")
    try:
        ready = wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
        assert condition(ready, "Ready")["status"] == "True"
        # The pool loses its pod and cannot get it back: Degraded, with the reason.
        kube_cluster.kubectl("label", "node", node, f"{label}-")
        kube_cluster.kubectl("delete", "pod", "-n", namespace, "-l", "disagg.dev/role=decode", "--wait=false")
        degraded = wait_phase(kube_cluster, namespace, "qwen3-32b", "Degraded")
        assert condition(degraded, "Degraded")["reason"] == "PoolLostPods"
        assert "decode has 0/1 ready replicas" in condition(degraded, "Degraded")["message"]
        assert condition(degraded, "Ready")["status"] == "False"
        kube_cluster.kubectl("label", "node", node, f"{label}=yes")
        wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
        reasons = {
            event["reason"]
            for event in kube_cluster.get(
                "events", "-n", namespace, "--field-selector", "involvedObject.name=qwen3-32b"
            )["items"]
        }
        assert {"PoolLostPods", "Recovered"} <= reasons
    finally:
        kube_cluster.run("label", "node", node, f"{label}-")


def _free_nvidia_node(kube: KubeCluster) -> str:
    """An NVIDIA node no pod is using, so the decode pod is certain to fit there."""
    used = {pod["spec"].get("nodeName") for pod in kube.get("pods", "-A")["items"]}
    for node in kube.get("nodes", "-l", "nvidia.com/gpu.present=true")["items"]:
        if node["metadata"]["name"] not in used:
            return str(node["metadata"]["name"])
    raise AssertionError("no free NVIDIA node")


def test_multi_node_pools_run_as_leaderworkersets(kube_cluster: KubeCluster, namespace: str) -> None:
    apply(kube_cluster, namespace, example("06-mooncake-store-agentic"))
    status = wait_phase(kube_cluster, namespace, "kimi-agentic", "Ready")
    assert status["decodeReady"] == "1/1"
    pods = kube_cluster.get("pods", "-n", namespace, "-l", "disagg.dev/role=decode")["items"]
    indices = sorted(pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] for pod in pods)
    assert indices == ["0", "1"]
    worker = next(p for p in pods if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1")
    env = {var["name"]: var.get("value") for var in worker["spec"]["containers"][0]["env"]}
    assert env.get("LWS_WORKER_INDEX") == "1"  # injected by LeaderWorkerSet, used for the start rank
    assert "--headless" in worker["spec"]["containers"][0]["args"]


def test_replica_topology_key_keeps_each_multi_node_replica_in_one_domain(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    # The fake NVIDIA nodes are two per zone (e2e/controlplane/nodes.yaml). Left alone, the scheduler's default
    # spreading puts the two pods of a decode replica in different zones; the key must keep each pair together.
    nodes = kube_cluster.get("nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    zones = {node["metadata"]["name"]: node["metadata"]["labels"].get("topology.kubernetes.io/zone") for node in nodes}
    if None in zones.values() or len(set(zones.values())) < 2:
        unavailable("needs the local control plane's fake NVIDIA nodes, two per zone")
    document = example("10-qwen35-dep-multinode-decode")
    document["spec"]["prefill"]["replicas"] = 1
    document["spec"]["decode"]["replicas"] = 2
    document["spec"]["decode"]["scheduling"] = {"replicaTopologyKey": "topology.kubernetes.io/zone"}
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen35-dep", "Ready", timeout=120)
    pods = kube_cluster.get("pods", "-n", namespace, "-l", "disagg.dev/deployment=qwen35-dep,disagg.dev/role=decode")
    groups: dict[str, set[str]] = {}
    for pod in pods["items"]:
        group = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
        groups.setdefault(group, set()).add(zones[pod["spec"]["nodeName"]])
    assert sorted(groups) == ["0", "1"]
    assert all(len(found) == 1 for found in groups.values()), groups


def test_server_side_dry_run_accepts_every_rendered_object(kube_cluster: KubeCluster, namespace: str) -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        objects = rendered(namespace, path.stem)
        listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        result = kube_cluster.run("apply", "--dry-run=server", "--server-side", "-f", "-", stdin=listing)
        assert result.returncode == 0, f"{path.name}: {result.stderr}"


def test_same_name_in_two_namespaces_do_not_interfere(kube_cluster: KubeCluster, namespace: str) -> None:
    other = f"{namespace}-b"
    kube_cluster.kubectl("create", "namespace", other)
    # One GPU per engine: two copies of the example at full size (16 GPUs each) fill the 4 fake 8-GPU nodes
    # exactly, and whether both 8-GPU decode pods fit then depends on where the scheduler put the prefill pods.
    document = example("01-minimal")
    document["spec"]["prefill"]["tensorParallel"] = 1
    document["spec"]["decode"]["tensorParallel"] = 1
    try:
        wait_for("default SA", lambda: kube_cluster.run("get", "sa/default", "-n", other).returncode == 0)
        apply(kube_cluster, namespace, document)
        apply(kube_cluster, other, document)
        wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
        wait_phase(kube_cluster, other, "qwen3-32b", "Ready")
        kept = {key: obj["metadata"]["uid"] for key, obj in children(kube_cluster, other, "qwen3-32b").items()}
        kube_cluster.kubectl("delete", "dd", "qwen3-32b", "-n", namespace)
        wait_for(
            "the first namespace's children to go",
            lambda: not children(kube_cluster, namespace, "qwen3-32b"),
            timeout=90,
        )
        assert {key: obj["metadata"]["uid"] for key, obj in children(kube_cluster, other, "qwen3-32b").items()} == kept
        assert status_of(kube_cluster, other, "qwen3-32b")["phase"] == "Ready"
    finally:
        kube_cluster.run("delete", "namespace", other, "--timeout=120s")


def test_killing_the_operator_mid_reconcile_converges_without_duplicates(
    kube_cluster: KubeCluster, namespace: str, operator: OperatorProcess
) -> None:
    stems = ("01-minimal", "02-nixl-1p1d-two-gpus", "08-lmcache-shared-server", "12-render-tier-tokens-only")
    names = ("qwen3-32b", "qwen3-small", "llama-lmcache", "qwen3-tokens-only")
    expected: set[tuple[str, str]] = set()
    for stem in stems:
        expected |= {(o["kind"], o["metadata"]["name"]) for o in rendered(namespace, stem)}
    # SIGKILL at the first child the operator writes: its passes over the four DisaggDeployments (about 40 applies,
    # one after the other) have then just begun. A watch on the kind applied first sees that write within
    # milliseconds (kubectl watches one kind at a time).
    watch = subprocess.Popen(
        [
            str(kube_cluster.kubectl_path),
            f"--kubeconfig={kube_cluster.kubeconfig}",
            "get",
            CHILD_KINDS[0].plural,
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/managed-by=disagg-operator",
            "--watch",
            "-o",
            "name",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for stem in stems:
            apply(kube_cluster, namespace, example(stem))
        assert watch.stdout is not None
        ready, _, _ = select.select([watch.stdout], [], [], 90)
        assert ready, "the operator wrote no child within 90 s"
        first = watch.stdout.readline()
        operator.kill()
    finally:
        watch.kill()
        watch.wait()
    assert first.strip(), "the watch ended before the operator wrote anything"
    at_kill = {key for name in names for key in children(kube_cluster, namespace, name)}
    statuses = [status_of(kube_cluster, namespace, name) for name in names]
    assert at_kill < expected or not all(statuses), "the operator finished before it was killed: nothing was tested"

    operator.start()
    for name in names:
        status = wait_phase(kube_cluster, namespace, name, "Ready", timeout=120)
        assert status["observedGeneration"] == 1
    listing = kube_cluster.get("deployments,services,configmaps", "-n", namespace)["items"]
    found = [(item["kind"], item["metadata"]["name"]) for item in listing]
    assert len(found) == len(set(found))
    assert set(found) - {("ConfigMap", "kube-root-ca.crt")} == {
        key for key in expected if key[0] in ("Deployment", "Service", "ConfigMap")
    }
    replica_sets = kube_cluster.get("replicasets", "-n", namespace)["items"]
    assert len(replica_sets) == len([n for n in found if n[0] == "Deployment"])  # one revision each, no churn


def test_operator_metrics_report_reconciles_and_phases(
    operator: OperatorProcess, namespace: str, kube_cluster: KubeCluster
) -> None:
    apply(kube_cluster, namespace, example("01-minimal"))
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    # The status reaches us through a watch, the metric through a scrape: wait for the operator to have both.
    text = wait_for(
        "the Ready phase in the metrics",
        lambda: t if metric_value(t := operator.metrics(), "disagg_deployments", phase="Ready") >= 1 else None,
        timeout=10,
    )
    assert metric_value(text, "disagg_objects_applied_total", kind="Deployment") >= 3
    assert "disagg_reconcile_duration_seconds_bucket" in text
