"""KV-store daemons owned by the DisaggDeployment: the Mooncake master or the LMCache server."""

from __future__ import annotations

from dataclasses import dataclass

from disagg.api.kvcache import MooncakeStore
from disagg.api.resolve import LmcacheServer
from disagg.api.units import format_binary_quantity, parse_quantity
from disagg.names import child_name, common_labels, selector_labels

from .model import ContainerPlan, PodPlan, ServicePlan, WorkloadPlan


@dataclass(frozen=True)
class StorePlan:
    workload: WorkloadPlan
    service: ServicePlan


def plan_store(
    deployment: str, mooncake: MooncakeStore | None, lmcache: LmcacheServer | None, engine_image: str
) -> StorePlan | None:
    """One KV-store daemon per DisaggDeployment: the Mooncake master when the store tier is Mooncake, else the
    LMCache server when anything uses LMCache."""
    if mooncake is not None:
        return _mooncake_master(deployment, mooncake, engine_image)
    if lmcache is not None:
        return _lmcache_server(deployment, lmcache.image, lmcache.port, lmcache.size)
    return None


def _mooncake_master(deployment: str, store: MooncakeStore, engine_image: str) -> StorePlan:
    args = [
        f"--rpc_port={store.master_port}",
        "--rpc_address=0.0.0.0",
        f"--metrics_port={store.metrics_port}",
        "--metrics_host=0.0.0.0",
    ]
    ports = [
        {"name": "rpc", "containerPort": store.master_port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": store.metrics_port, "protocol": "TCP"},
    ]
    container = ContainerPlan(
        name="mooncake-master",
        image=store.master_image or engine_image,
        image_pull_policy="IfNotPresent",
        command=["mooncake_master"],
        args=args,
        ports=ports,
        resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        probes=_tcp_probes("rpc"),
    )
    return _store(deployment, container, "mooncake-master")


def _lmcache_server(deployment: str, image: str, port: int, size: str | int) -> StorePlan:
    memory = format_binary_quantity(parse_quantity(size))
    container = ContainerPlan(
        name="lmcache-server",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["lmcache_server"],
        args=["0.0.0.0", str(port), "cpu"],
        ports=[{"name": "lmcache", "containerPort": port, "protocol": "TCP"}],
        resources={"requests": {"cpu": "2", "memory": memory}, "limits": {"memory": memory}},
        probes=_tcp_probes("lmcache"),
    )
    return _store(deployment, container, "lmcache-server")


def _store(deployment: str, container: ContainerPlan, app_name: str) -> StorePlan:
    name = child_name(deployment, "kv-store")
    labels = common_labels(deployment, "kv-store", app_name=app_name)
    no_token = {"automountServiceAccountToken": False}  # the store daemons never call the Kubernetes API (D77)
    pod = PodPlan(labels=labels, annotations={}, containers=[container], spec_extra=no_token)
    workload = WorkloadPlan(
        "Deployment", name, "kv-store", labels, selector_labels(deployment, "kv-store"), 1, pod, {"type": "Recreate"}
    )
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in container.ports
    ]
    return StorePlan(workload, ServicePlan(name, labels, selector_labels(deployment, "kv-store"), ports))


def _tcp_probes(port: str) -> dict[str, object]:
    socket = {"tcpSocket": {"port": port}}
    return {
        "livenessProbe": {**socket, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {**socket, "periodSeconds": 5, "failureThreshold": 2},
    }
