"""How a child workload's progress is read from its status: the desired count, the counts, whether the controller has
seen the latest spec, and a rollout past its deadline. A DaemonSet's desired count is the scheduler's (one pod per
selected node), not a spec field it does not have."""

from __future__ import annotations

from disagg.reconcile.children import WorkloadProgress, workload_progress


def test_a_daemon_set_counts_the_nodes_it_is_scheduled_on() -> None:
    daemons = {
        "kind": "DaemonSet",
        "metadata": {"generation": 3},
        "spec": {"replicas": 7},  # not a DaemonSet field: never the desired count
        "status": {
            "desiredNumberScheduled": 4,
            "currentNumberScheduled": 4,
            "numberReady": 3,
            "updatedNumberScheduled": 2,
            "observedGeneration": 3,
        },
    }
    assert workload_progress(daemons) == WorkloadProgress(
        desired=4, replicas=4, ready=3, updated=2, current_generation=True
    )
    daemons["status"]["observedGeneration"] = 2
    progress = workload_progress(daemons)
    assert progress is not None and not progress.current_generation
    del daemons["status"]["observedGeneration"]
    progress = workload_progress(daemons)
    assert progress is not None and not progress.current_generation  # a DaemonSet not yet seen by its controller


def test_a_deployment_reports_its_spec_count_and_a_rollout_past_its_deadline() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"generation": 2},
        "spec": {"replicas": 3},
        "status": {
            "replicas": 3,
            "readyReplicas": 1,
            "updatedReplicas": 2,
            "observedGeneration": 1,
            "conditions": [
                {"type": "Available", "reason": "ProgressDeadlineExceeded", "message": "not this one"},
                {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "rs x has timed out"},
            ],
        },
    }
    assert workload_progress(deployment) == WorkloadProgress(
        desired=3, replicas=3, ready=1, updated=2, current_generation=False, stuck_reason="rs x has timed out"
    )
    assert workload_progress(None) is None


def test_a_leader_worker_set_is_judged_by_its_counts_not_an_observed_generation() -> None:
    lws = {"kind": "LeaderWorkerSet", "metadata": {"generation": 5}, "spec": {"replicas": 2}}
    lws["status"] = {"observedGeneration": 1}  # whatever it says
    progress = workload_progress(lws)
    assert progress is not None and progress.current_generation and progress.desired == 2 and progress.ready == 0
    lws["kind"] = "Deployment"
    progress = workload_progress(lws)
    assert progress is not None and not progress.current_generation


def test_a_deployment_without_a_replica_count_wants_one_as_kubernetes_defaults_it() -> None:
    deployment = {"kind": "Deployment", "metadata": {"generation": 1}, "spec": {}, "status": {"readyReplicas": 1}}
    progress = workload_progress(deployment)
    assert progress is not None and progress.desired == 1 and progress.ready == 1
