"""Command lines and readiness checks of the control-plane components."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from . import kubeapi
from .config import BinDir
from .pki import SERVICE_CIDR, Pki

LOOPBACK = "127.0.0.1"
# Service-account tokens are issued for the in-cluster name, as on real clusters.
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Pod IPs kwok hands out; must not overlap the service range (kwok's default does). They are loopback
# addresses so that a test can serve a fake pod's HTTP endpoints (e.g. vLLM /metrics for the autoscaler) from
# this machine at exactly the pod's IP; Linux answers on all of 127.0.0.0/8.
POD_CIDR = "127.1.0.0/16"
# kwok manages only nodes carrying this annotation, so it never touches a real
# node if someone points it at another cluster by mistake.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# Controllers and the scheduler serve self-generated certs; their health and
# metrics paths are allowed anonymously, as kubeadm and kwokctl configure them.
ALWAYS_ALLOW = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    lws_webhook: int
    lws_health: int

    @classmethod
    def pick(cls) -> Ports:
        """Free loopback ports, all held open together so none is picked twice."""
        socks: list[socket.socket] = []
        try:
            for _ in fields(cls):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((LOOPBACK, 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Ports:
        return cls(**data)


@dataclass(frozen=True)
class Layout:
    """Files in the state directory."""

    root: Path

    @property
    def pki(self) -> Pki:
        return Pki(self.root / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.kubeconfig"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def lws_dir(self) -> Path:
        return self.root / "lws"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def marker(self) -> Path:
        return self.root / ".disagg-localcluster"


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Component:
    """A process to start.

    prepare runs before the process starts, finish once it is ready (e.g. to
    install CRDs the process needs, or to register its webhooks).
    """

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    timeout_seconds: float
    prepare: Callable[[], None] = _nothing
    finish: Callable[[], None] = _nothing


def apiserver_url(ports: Ports) -> str:
    return f"https://{LOOPBACK}:{ports.apiserver}"


def admin_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.client_cert("admin")), str(pki.client_key("admin")))
    return ctx


def fetch_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    """The /healthz convention: status 200 with body "ok"."""
    return kubeapi.fetch(url, ctx) == b"ok"


def _is_ok(url: str, ctx: ssl.SSLContext | None) -> Callable[[], bool]:
    return lambda: fetch_ok(url, ctx)


def _etcd_healthy(url: str) -> Callable[[], bool]:
    def check() -> bool:
        body = kubeapi.fetch(url)
        return body is not None and json.loads(body).get("health") == "true"

    return check


def etcd(bins: BinDir, lay: Layout, ports: Ports) -> Component:
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    argv = [
        str(bins.binary("etcd")),
        "--name=disagg-e2e",
        f"--data-dir={lay.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=disagg-e2e={peer}",
        # Test data is disposable; fsync stalls on a busy disk only add flakiness.
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
    ]
    return Component("etcd", argv, _etcd_healthy(f"{client}/health"), 30)


def kube_apiserver(bins: BinDir, lay: Layout, ports: Ports) -> Component:
    pki = lay.pki
    argv = [
        str(bins.binary("kube-apiserver")),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        # Bind and advertise loopback; otherwise the apiserver advertises the
        # default-route interface address in the `kubernetes` endpoints.
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        # On top of the default plugins (ServiceAccount, PodSecurity, ...):
        # pods requesting e.g. nvidia.com/gpu automatically tolerate the
        # nvidia.com/gpu taint of GPU nodes, as on GKE.
        "--enable-admission-plugins=ExtendedResourceToleration",
        "--allow-privileged=true",
        # No kubelets and one apiserver: nothing should rewrite the
        # `kubernetes` Service endpoints to a non-loopback address.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]
    return Component("kube-apiserver", argv, lambda: apiserver_ready(lay.pki, ports), 90)


def apiserver_ready(pki: Pki, ports: Ports) -> bool:
    return fetch_ok(f"{apiserver_url(ports)}/readyz", admin_context(pki))


def kube_controller_manager(bins: BinDir, lay: Layout, ports: Ports) -> Component:
    pki = lay.pki
    argv = [
        str(bins.binary("kube-controller-manager")),
        f"--kubeconfig={lay.component_kubeconfig('controller-manager')}",
        "--leader-elect=false",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        ALWAYS_ALLOW,
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
        # Each controller acts with its own ServiceAccount, as kubeadm sets up,
        # so RBAC problems in bootstrap policy would surface here too.
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        "--cluster-name=disagg-e2e",
        # No kube-proxy consumes Endpoints here, and pods have loopback IPs (see POD_CIDR) that Endpoint(Slice)
        # validation refuses; without these controllers every Service would collect warning events.
        "--controllers=*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller",
        # Default client QPS (20) makes garbage collection and namespace
        # deletion visibly slow in tests.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]
    url = f"https://{LOOPBACK}:{ports.controller_manager}/healthz"
    return Component("kube-controller-manager", argv, _is_ok(url, kubeapi.insecure_context()), 60)


def kube_scheduler(bins: BinDir, lay: Layout, ports: Ports) -> Component:
    argv = [
        str(bins.binary("kube-scheduler")),
        f"--kubeconfig={lay.component_kubeconfig('scheduler')}",
        "--leader-elect=false",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        ALWAYS_ALLOW,
    ]
    url = f"https://{LOOPBACK}:{ports.scheduler}/healthz"
    return Component("kube-scheduler", argv, _is_ok(url, kubeapi.insecure_context()), 60)


def kwok(bins: BinDir, lay: Layout, ports: Ports) -> Component:
    key, value = KWOK_NODE_ANNOTATION
    argv = [
        str(bins.binary("kwok")),
        f"--kubeconfig={lay.component_kubeconfig('kwok')}",
        f"--config={bins.stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--node-ip={LOOPBACK}",
        f"--cidr={POD_CIDR}",
        "--node-lease-duration-seconds=40",
        f"--server-address={LOOPBACK}:{ports.kwok}",
    ]
    url = f"http://{LOOPBACK}:{ports.kwok}/healthz"
    return Component("kwok", argv, _is_ok(url, None), 30)


Factory = Callable[[BinDir, Layout, Ports], Component]
# Start order matters: each component needs the ones before it.
CORE: tuple[Factory, ...] = (etcd, kube_apiserver, kube_controller_manager, kube_scheduler, kwok)
