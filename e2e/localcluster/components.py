"""Command lines and readiness checks of the control-plane components."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from . import kubeapi, network
from .config import BinDir
from .pki import SERVICE_CIDR, Pki

LOOPBACK = "127.0.0.1"
# Service-account tokens are issued for the in-cluster name, as on real clusters.
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Pod IPs kwok hands out without a real node; must not overlap the service range (kwok's default does). They are
# loopback addresses so that a test can serve a fake pod's HTTP endpoints (e.g. vLLM /metrics for the autoscaler)
# from this machine at exactly the pod's IP; Linux answers on all of 127.0.0.0/8. With a real node kwok's pods get
# network.KWOK_POD_CIDR instead, which is just as local (see network.py) and valid in EndpointSlices.
LOOPBACK_POD_CIDR = "127.1.0.0/16"
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
    kubelet: int
    kubelet_healthz: int
    kube_proxy_healthz: int
    kube_proxy_metrics: int
    coredns_ready: int

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
class Addresses:
    """Where the control plane listens and which addresses kwok's pods get.

    Without a real node everything stays on loopback. With one, the API server listens on the node's bridge
    address, which the host and the real pods both reach (pods through the `kubernetes` Service, whose endpoint
    the API server then maintains itself), and kwok's pods move to a local range that EndpointSlices accept.
    """

    api_host: str
    kwok_pod_cidr: str
    real_node: bool

    @classmethod
    def loopback(cls) -> Addresses:
        return cls(LOOPBACK, LOOPBACK_POD_CIDR, False)

    @classmethod
    def with_real_node(cls) -> Addresses:
        return cls(network.NODE_IP, network.KWOK_POD_CIDR, True)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Addresses:
        return cls(str(data["api_host"]), str(data["kwok_pod_cidr"]), bool(data["real_node"]))


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
    def node_dir(self) -> Path:
        """Everything of the real node that lives as long as the cluster (the image store does not)."""
        return self.root / "node"

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


def apiserver_url(addrs: Addresses, ports: Ports) -> str:
    return f"https://{addrs.api_host}:{ports.apiserver}"


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


def etcd(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
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


def kube_apiserver(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    pki = lay.pki
    argv = [
        str(bins.binary("kube-apiserver")),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        # Bind and advertise one local address (loopback, or the real node's bridge); otherwise the apiserver
        # listens everywhere and advertises the default-route interface address in the `kubernetes` endpoints.
        f"--bind-address={addrs.api_host}",
        f"--advertise-address={addrs.api_host}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # The Node authorizer and NodeRestriction confine the real node's kubelet to its own node and pods, as on
        # any kubeadm cluster.
        "--authorization-mode=Node,RBAC",
        # On top of the default plugins (ServiceAccount, PodSecurity, ...):
        # pods requesting e.g. nvidia.com/gpu automatically tolerate the
        # nvidia.com/gpu taint of GPU nodes, as on GKE.
        "--enable-admission-plugins=ExtendedResourceToleration,NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
    ]
    if addrs.real_node:
        argv += [
            # Real pods reach the API server through the `kubernetes` Service, whose endpoint it keeps itself.
            "--endpoint-reconciler-type=lease",
            # `kubectl logs/exec` go to the kubelet at its InternalIP, authenticated with a client certificate.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki.client_cert('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.client_key('apiserver-kubelet-client')}",
        ]
    else:
        # No kubelets and one apiserver: nothing should rewrite the `kubernetes` Service endpoints to a
        # non-loopback address.
        argv.append("--endpoint-reconciler-type=none")
    return Component("kube-apiserver", argv, lambda: apiserver_ready(lay.pki, addrs, ports), 90)


def apiserver_ready(pki: Pki, addrs: Addresses, ports: Ports) -> bool:
    return fetch_ok(f"{apiserver_url(addrs, ports)}/readyz", admin_context(pki))


def kube_controller_manager(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
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
        # Default client QPS (20) makes garbage collection and namespace
        # deletion visibly slow in tests.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]
    if not addrs.real_node:
        # No kube-proxy consumes Endpoints then, and pods have loopback IPs (LOOPBACK_POD_CIDR) that
        # Endpoint(Slice) validation refuses; without these controllers every Service would collect warning events.
        argv.append(
            "--controllers=*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller"
        )
    url = f"https://{LOOPBACK}:{ports.controller_manager}/healthz"
    return Component("kube-controller-manager", argv, _is_ok(url, kubeapi.insecure_context()), 60)


def kube_scheduler(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
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


def kwok(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    key, value = KWOK_NODE_ANNOTATION
    argv = [
        str(bins.binary("kwok")),
        f"--kubeconfig={lay.component_kubeconfig('kwok')}",
        f"--config={bins.stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--node-ip={LOOPBACK}",
        f"--cidr={addrs.kwok_pod_cidr}",
        "--node-lease-duration-seconds=40",
        f"--server-address={LOOPBACK}:{ports.kwok}",
    ]
    url = f"http://{LOOPBACK}:{ports.kwok}/healthz"
    return Component("kwok", argv, _is_ok(url, None), 30)


Factory = Callable[[BinDir, Layout, Ports, Addresses], Component]
# Start order matters: each component needs the ones before it.
CORE: tuple[Factory, ...] = (etcd, kube_apiserver, kube_controller_manager, kube_scheduler, kwok)
