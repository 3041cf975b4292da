"""The operator's own Prometheus metrics, in a registry of their own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_DURATION = Histogram(
    "disagg_reconcile_duration_seconds",
    "Time to reconcile one DisaggDeployment.",
    ["result"],
    registry=REGISTRY,
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILE_ERRORS = Counter(
    "disagg_reconcile_errors_total", "Reconciles that did not complete, by reason.", ["reason"], registry=REGISTRY
)
OBJECTS_APPLIED = Counter(
    "disagg_objects_applied_total", "Children applied with server-side apply, by kind.", ["kind"], registry=REGISTRY
)
OBJECTS_PRUNED = Counter(
    "disagg_objects_pruned_total",
    "Children deleted because the spec no longer wants them.",
    ["kind"],
    registry=REGISTRY,
)
DEPLOYMENTS_BY_PHASE = Gauge("disagg_deployments", "DisaggDeployments by phase.", ["phase"], registry=REGISTRY)
QUEUE_DEPTH = Gauge("disagg_reconcile_queue_depth", "Keys waiting to be reconciled.", registry=REGISTRY)
QUEUE_WAIT = Histogram(
    "disagg_reconcile_queue_wait_seconds",
    "Time a key waited in the work queue, from when it was first asked for until a worker took it, by the lane it "
    "was taken from (change: a spec not yet reconciled; event; revisit).",
    ["lane"],
    registry=REGISTRY,
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
SCALING_DECISIONS = Counter(
    "disagg_scaling_decisions_total",
    "Replica changes made by the autoscaler.",
    ["pool", "direction"],
    registry=REGISTRY,
)
SCALING_DESIRED = Gauge(
    "disagg_scaling_desired_replicas",
    "Replicas the autoscaler wants, per DisaggDeployment and pool.",
    ["namespace", "name", "pool"],
    registry=REGISTRY,
)
CLIENT_REQUESTS = Counter(
    "disagg_kube_requests_total",
    "Requests the reconcile workers sent to the API server, by method and status code.",
    ["method", "code"],
    registry=REGISTRY,
)
CLIENT_WAIT = Histogram(
    "disagg_kube_rate_limit_wait_seconds",
    "Time a request waited for the client-side rate limit and in-flight cap before it was sent, by priority "
    "(urgent: a pass of the change lane).",
    ["priority"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
APPLIES_SKIPPED = Counter(
    "disagg_objects_unchanged_total",
    "Children not applied because neither the spec nor the live object changed since the operator applied them.",
    ["kind"],
    registry=REGISTRY,
)
PASSES_APPLY_SKIPPED = Counter(
    "disagg_reconcile_apply_skipped_total",
    "Passes that ran only the observe and status steps: since the last successful pass, only statuses changed (D249).",
    registry=REGISTRY,
)
APPLIED_RESTORED = Counter(
    "disagg_applied_restored_total",
    "DisaggDeployments whose memory of what was applied was taken from status after a takeover or a restart (D192).",
    registry=REGISTRY,
)
CACHED_OBJECTS = Gauge(
    "disagg_cache_objects", "Objects in the operator's watch cache, by kind.", ["kind"], registry=REGISTRY
)
WATCH_RESTARTS = Counter(
    "disagg_watch_relists_total",
    "Full lists of a kind after its watch could not continue (start, expired resource version, errors).",
    ["kind"],
    registry=REGISTRY,
)
INFORMER_REFUSED = Gauge(
    "disagg_informer_refused",
    "1 while RBAC refuses the operator's list or watch of a kind it caches (D151); scope is the watched namespace, "
    "empty for all.",
    ["kind", "scope"],
    registry=REGISTRY,
)
LEADER = Gauge(
    "disagg_leader", "1 while this replica holds the leader lease and reconciles, else 0.", registry=REGISTRY
)
LEADER_TRANSITIONS = Counter(
    "disagg_leader_transitions_total",
    "Times this replica started or stopped leading.",
    ["change"],
    registry=REGISTRY,
)

SERVING = Gauge(
    "disagg_serving",
    "The Serving condition per DisaggDeployment: 1 True, 0 False, -1 Unknown.",
    ["namespace", "name"],
    registry=REGISTRY,
)
SERVING_CHECKS = Counter(
    "disagg_serving_checks_total",
    "Serving check rounds, by method (pairs, endpoint) and result (serving, failing, unknown).",
    ["method", "result"],
    registry=REGISTRY,
)
SERVING_CHECK_DURATION = Histogram(
    "disagg_serving_check_duration_seconds",
    "Time of one serving check round (all pairs are probed at once).",
    ["method"],
    registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
SERVING_PAIRS = Gauge(
    "disagg_serving_pairs",
    "Pairs per DisaggDeployment by state: passing, failing (not drained), drained.",
    ["namespace", "name", "state"],
    registry=REGISTRY,
)
REMEDIATIONS = Counter(
    "disagg_remediations_total",
    "Recovery actions: recreated (an engine pod deleted), drained, undrained, held (report only or rate limit).",
    ["action"],
    registry=REGISTRY,
)
ADMISSIONS = Counter(
    "disagg_engine_admissions_total",
    "Engine pods made Ready by the serving gate (admitted) or made unready again (revoked, after a restart).",
    ["result"],
    registry=REGISTRY,
)


def serve(port: int) -> None:
    """Expose /metrics on all interfaces (a daemon thread; it ends with the process)."""
    start_http_server(port, registry=REGISTRY)
