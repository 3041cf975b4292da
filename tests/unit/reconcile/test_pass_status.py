"""Status through whole passes: from what the children and their pods report to conditions, phase and events."""

from __future__ import annotations

from tests.support.reconciling import MINIMAL, NAMESPACE, deployment_document, harness


async def test_status_follows_the_children_from_pending_to_ready() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    assert h.status["phase"] == "Pending"
    assert h.condition("Progressing")["status"] == "True" and h.condition("Ready")["status"] == "False"
    assert h.status["observedGeneration"] == 1
    h.settle()
    await h.reconcile()
    status = h.status
    assert status["phase"] == "Ready"
    assert (status["prefillReady"], status["decodeReady"]) == ("2/2", "1/1")
    assert status["endpoint"] == f"http://m.{NAMESPACE}.svc:8000"
    assert status["router"] == {"replicas": 1, "readyReplicas": 1, "ready": True}
    assert h.condition("Ready")["status"] == "True" and h.condition("Degraded")["status"] == "False"
    assert [e["reason"] for e in h.events() if e["reason"] != "Created"] == ["Ready"]


async def test_an_invalid_spec_is_reported_and_every_child_left_as_it_was() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    versions = {key: obj["metadata"]["resourceVersion"] for key, obj in h.children().items()}
    # Heterogeneous TP must divide; CEL would refuse this on a real API server, the Python rule in any case.
    h.edit_spec(lambda spec: spec.update(prefill={"replicas": 2, "tensorParallel": 2}, decode={"tensorParallel": 3}))
    assert await h.reconcile() == "invalid"
    assert {key: obj["metadata"]["resourceVersion"] for key, obj in h.children().items()} == versions
    status = h.status
    assert status["phase"] == "Invalid" and status["observedGeneration"] == 2
    spec_valid = h.condition("SpecValid")
    assert spec_valid["status"] == "False" and "spec.decode.tensorParallel" in spec_valid["message"]
    assert h.condition("Ready")["status"] == "True"  # still describes what serves
    assert [e["reason"] for e in h.events() if e["type"] == "Warning"] == ["InvalidSpec"]


async def test_a_pool_that_lost_pods_is_degraded_until_whole_again() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.settle()
    await h.reconcile()
    h.settle(**{"m-prefill": 1})
    await h.reconcile()
    degraded = h.condition("Degraded")
    assert (h.status["phase"], degraded["reason"]) == ("Degraded", "PoolLostPods")
    assert "prefill has 1/2 ready replicas" in degraded["message"]
    h.settle()
    await h.reconcile()
    assert h.status["phase"] == "Ready"
    assert [e["reason"] for e in h.events() if e["reason"] != "Created"] == [
        "Ready",
        "NotReady",
        "PoolLostPods",
        "Ready",
        "Recovered",
    ]


async def test_pods_explain_a_pool_that_is_not_ready() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    h.server.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "m-decode-abc",
                "namespace": NAMESPACE,
                "labels": {
                    "disagg.dev/deployment": "m",
                    "disagg.dev/role": "decode",
                    "app.kubernetes.io/managed-by": "disagg-operator",
                },
            },
            "spec": {"containers": [{"name": "vllm", "image": "x"}]},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                    }
                ]
            },
        }
    )
    h.settle(**{"m-decode": 0})
    await h.reconcile()
    progressing = h.condition("Progressing")
    assert progressing["reason"] == "PodsNotRunning"
    assert (
        "pod m-decode-abc unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
        in progressing["message"]
    )


async def test_without_pod_read_access_status_still_comes() -> None:
    h = harness(deployment_document(MINIMAL))
    h.server.fail(
        403, 'pods is forbidden: User "op" cannot list resource "pods"', kind="Pod", reason="Forbidden", times=None
    )
    await h.reconcile()
    h.settle()
    assert await h.reconcile() == "ok"
    assert h.status["phase"] == "Ready"


async def test_the_pairing_revision_and_its_generation_are_kept_in_status_and_on_the_pods() -> None:
    h = harness(deployment_document(MINIMAL))
    await h.reconcile()
    revision, generation = h.status["pairingRevision"], h.status["pairingGeneration"]
    assert generation == 1

    def template_pairing(name: str) -> tuple[str, str]:
        template = h.children()[("Deployment", name)]["spec"]["template"]["metadata"]
        return template["labels"]["disagg.dev/pairing-revision"], template["annotations"][
            "disagg.dev/pairing-generation"
        ]

    assert template_pairing("m-prefill") == template_pairing("m-decode") == (revision, "1")
    # Scaling keeps the revision and its generation: the engine pods do not change.
    h.edit_spec(lambda spec: spec["decode"].update(replicas=3))
    await h.reconcile()
    assert (h.status["pairingRevision"], h.status["pairingGeneration"]) == (revision, 1)
    assert template_pairing("m-decode") == (revision, "1")
    # A new engine image is a new revision on both pools, ordered after the first by its spec generation.
    h.edit_spec(lambda spec: spec.setdefault("engine", {}).update(image="vllm/vllm-openai:v0.34.0"))
    await h.reconcile()
    assert h.status["pairingRevision"] != revision and h.status["pairingGeneration"] == 3
    assert template_pairing("m-prefill") == template_pairing("m-decode") == (h.status["pairingRevision"], "3")
