"""Planning decisions for engine pools: multi-node commands, group policies, ports, memory, Services."""

from __future__ import annotations

from typing import Any

from disagg.api.owned import ENGINE_HTTP_PORT
from disagg.api.resolve import may_gate_pools
from disagg.api.serving import CheckMode
from disagg.names import LWS_WORKER_INDEX_LABEL
from disagg.plan import DeploymentPlan, build_plan
from disagg.plan.model import Installation, WorkloadPlan
from tests.support.rendering import FRONTEND_ROUTER, deployment_from_yaml


def plan(spec: str, metadata: str = "{name: t}", serving: CheckMode = "Enforce") -> DeploymentPlan:
    text = f"apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {metadata}\nspec:\n{spec}"
    return build_plan(deployment_from_yaml(text), "ns", Installation(serving_check=serving))


def workload(p: DeploymentPlan, name: str) -> WorkloadPlan:
    return next(w for w in p.workloads if w.name == name)


def engine(p: DeploymentPlan, role: str) -> Any:
    return next(e for e in p.engines if e.role == role)


DP_MULTI_NODE = "  model: {name: m}\n  decode: {dataParallel: 8, nodesPerReplica: 2, expertParallel: true}\n"


def test_data_parallel_workers_start_at_their_index_times_the_ranks_per_node() -> None:
    p = plan(DP_MULTI_NODE)
    decode = engine(p, "decode")
    leader = decode.argv
    assert leader[leader.index("--data-parallel-size") + 1] == "8"
    assert leader[leader.index("--data-parallel-size-local") + 1] == "4"
    assert "--headless" not in leader and "--data-parallel-start-rank" not in leader
    assert decode.worker_argv[-2:] == ["--data-parallel-start-rank", "4"] and "--headless" in decode.worker_argv
    worker_pod = workload(p, "t-decode").worker_pod
    assert worker_pod is not None
    script = worker_pod.containers[0].command[2]
    assert "--data-parallel-start-rank $((LWS_WORKER_INDEX * 4))" in script


def test_tensor_parallel_replicas_across_nodes_rank_their_nodes() -> None:
    decode = engine(plan("  model: {name: m}\n  decode: {tensorParallel: 16, nodesPerReplica: 2}\n"), "decode")
    assert decode.argv[decode.argv.index("--nnodes") + 1] == "2"
    assert decode.argv[decode.argv.index("--node-rank") + 1] == "0"
    assert decode.worker_argv[decode.worker_argv.index("--node-rank") + 1] == "1"
    assert "--master-addr" in decode.argv and "--data-parallel-address" not in decode.argv


def test_a_multi_node_replica_is_one_leaderworkerset_group_restarted_as_a_whole() -> None:
    group = workload(plan(DP_MULTI_NODE), "t-decode")
    assert (group.kind, group.group_size) == ("LeaderWorkerSet", 2)
    assert (group.startup_policy, group.group_restart_policy) == ("LeaderCreated", "RecreateGroupOnPodRestart")
    assert "rollingUpdateConfiguration" in group.strategy
    single = workload(plan(DP_MULTI_NODE), "t-prefill")
    assert (single.kind, single.startup_policy, single.group_restart_policy) == ("Deployment", None, None)


def test_every_pod_of_a_replica_declares_every_nixl_rank_of_the_replica() -> None:
    group = workload(plan(DP_MULTI_NODE), "t-decode")
    assert group.worker_pod is not None
    for pod in (group.pod, group.worker_pod):
        ports = [port["containerPort"] for port in pod.containers[0].ports if port["name"].startswith("nixl-")]
        assert ports == list(range(5600, 5608))


def test_pinned_host_memory_counts_every_rank_in_the_pod() -> None:
    p = plan(
        "  model: {name: m}\n  kvCache: {cpu: {size: 1Gi, pools: [decode]}}\n"
        "  decode: {dataParallel: 8, nodesPerReplica: 2}\n"
    )
    resources = workload(p, "t-decode").pod.containers[0].resources
    assert resources["requests"]["memory"] == "4Gi"  # 1Gi per engine core, 4 ranks per pod


def test_the_pool_service_selects_only_the_pods_that_serve() -> None:
    p = plan(DP_MULTI_NODE)
    services = {s.name: s for s in p.services}
    assert services["t-decode-pool"].selector[LWS_WORKER_INDEX_LABEL] == "0"
    assert LWS_WORKER_INDEX_LABEL not in services["t-prefill-pool"].selector
    assert services["t-decode-pool"].headless and services["t-decode-pool"].ports[0]["port"] == ENGINE_HTTP_PORT


def test_vllm_router_discovers_the_api_pods_on_the_engines_port() -> None:
    p = plan(DP_MULTI_NODE + "  frontend: {router: {implementation: vllm-router}}\n")
    argv = p.router_argv
    assert argv is not None
    decode_selector = argv[argv.index("--decode-selector") + 1 : argv.index("--service-discovery-namespace")]
    assert decode_selector == [
        "disagg.dev/deployment=t",
        "disagg.dev/role=decode",
        f"{LWS_WORKER_INDEX_LABEL}=0",
    ]
    port = argv[argv.index("--service-discovery-port") + 1]
    assert port == str(ENGINE_HTTP_PORT) == engine(p, "decode").argv[engine(p, "decode").argv.index("--port") + 1]


def test_the_frontend_discovers_the_api_pods_on_the_engines_port() -> None:
    p = plan(DP_MULTI_NODE)
    argv = p.frontend_argv
    assert argv is not None and p.router_argv is None
    decode = [argv[i + 1] for i, flag in enumerate(argv) if flag == "--decode-selector"]
    assert decode == ["disagg.dev/deployment=t", "disagg.dev/role=decode", f"{LWS_WORKER_INDEX_LABEL}=0"]
    assert argv[argv.index("--engine-port") + 1] == str(ENGINE_HTTP_PORT)


def test_moriio_engines_register_with_vllm_router_at_the_default_port() -> None:
    p = plan(
        "  model: {name: m}\n  transfer: {connector: moriio, moriio: {mode: read}}\n"
        "  frontend: {router: {implementation: vllm-router}}\n"
    )
    assert p.router_argv is not None
    assert p.router_argv[p.router_argv.index("--vllm-discovery-address") + 1] == "0.0.0.0:36367"
    router = workload(p, "t-router").pod.containers[0]
    assert {"name": "registration", "containerPort": 36367, "protocol": "TCP"} in router.ports


def test_without_a_router_the_endpoint_selects_the_decode_api_pods() -> None:
    p = plan(
        "  model: {name: m}\n  transfer: {connector: custom, custom: {connectorClass: X}}\n"
        "  decode: {dataParallel: 2, nodesPerReplica: 2}\n"
    )
    assert p.router_argv is None and not any(w.role == "router" for w in p.workloads)
    endpoint = next(s for s in p.services if s.name == "t")
    assert endpoint.selector == {"disagg.dev/deployment": "t", "disagg.dev/role": "decode", LWS_WORKER_INDEX_LABEL: "0"}


def test_autoscaled_workloads_start_from_the_spec_count_and_are_marked_as_owned_elsewhere() -> None:
    p = plan("  model: {name: m}\n  decode: {replicas: 2, autoscaling: {enabled: true, controller: external}}\n")
    assert {w.name: w.replicas_owned_elsewhere for w in p.workloads} == {
        "t-prefill": False,
        "t-decode": True,
        "t-router": False,
    }
    # The count a new workload starts with; tests/unit/reconcile/test_pass_replicas.py: when it stops being sent.
    assert workload(p, "t-decode").replicas == 2


def test_a_deployment_read_from_a_cluster_owns_its_children() -> None:
    assert plan("  model: {name: m}\n").owner_references == []
    assert plan("  model: {name: m}\n", metadata="{name: t, uid: u-1}").owner_references == [
        {
            "apiVersion": "disagg.dev/v1alpha1",
            "kind": "DisaggDeployment",
            "name": "t",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_gated_engines_drain_their_requests_after_the_frontend_stopped_choosing_them() -> None:
    # vLLM's default --shutdown-timeout (0) aborts in-flight requests on SIGTERM: every pod a paced rollout removes
    # would fail what it was serving.
    gated = plan("  model: {name: m}\n" + FRONTEND_ROUTER)
    for role in ("prefill", "decode"):
        argv = engine(gated, role).argv
        assert argv[argv.index("--shutdown-timeout") + 1] == "30"
        pod = workload(gated, f"t-{role}").pod
        assert pod.containers[0].lifecycle == {"preStop": {"sleep": {"seconds": 5}}}
        assert pod.spec_extra["terminationGracePeriodSeconds"] == 5 + 30 + 30
    # The spec's own timeout wins; without the gate (vllm-router, or Report) nothing changes.
    own = plan("  model: {name: m}\n  engine: {shutdownTimeoutSeconds: 90}\n" + FRONTEND_ROUTER)
    argv = engine(own, "decode").argv
    assert argv[argv.index("--shutdown-timeout") + 1] == "90"
    assert workload(own, "t-decode").pod.spec_extra["terminationGracePeriodSeconds"] == 5 + 90 + 30
    vllm_router = "  frontend: {router: {implementation: vllm-router}}\n"
    for ungated in (
        plan("  model: {name: m}\n" + vllm_router),
        plan("  model: {name: m}\n" + FRONTEND_ROUTER, serving="Report"),
    ):
        assert "--shutdown-timeout" not in engine(ungated, "decode").argv
        pod = workload(ungated, "t-decode").pod
        assert pod.containers[0].lifecycle is None and pod.spec_extra["terminationGracePeriodSeconds"] == 30


def test_validation_and_the_planner_agree_on_which_pools_are_gated() -> None:
    # api/resolve.py gates_pools decides it once: the operator's frontend (the default, or a custom router container
    # with an admin port) and an enforcing check. Validation reads an unset mode as Enforce.
    cases = {
        "": True,  # the operator's frontend is the default router
        "  frontend: {router: {implementation: disagg-frontend}}\n": True,
        FRONTEND_ROUTER: True,
        "  frontend: {router: {implementation: vllm-router}}\n": False,
        "  serving: {check: {mode: Report}}\n": False,
        "  frontend:\n    router:\n      customContainer: {image: r:1, command: [r]}\n": False,
    }
    for extra, expected in cases.items():
        head = "apiVersion: disagg.dev/v1alpha1\nkind: DisaggDeployment\nmetadata: {name: t}\nspec:\n"
        deployment = deployment_from_yaml(f"{head}  model: {{name: m}}\n{extra}")
        planned = build_plan(deployment, "ns", Installation(serving_check="Enforce"))
        gated = "readinessGates" in workload(planned, "t-decode").pod.spec_extra
        assert may_gate_pools(deployment.spec) == gated == planned.serving.gated == expected, extra
        assert planned.serving.method == ("pairs" if expected or "Report" in extra else "endpoint"), extra
