"""The real worker node: containerd, a kubelet, kube-proxy and cluster DNS, running real pods beside kwok's.

The kubelet is built from the control plane's own module set (build.sh); containerd, its runc shim and runc come
from Debian. The settings that make a kubelet run on this kind of machine (cgroup v1, no systemd, no swap
accounting) are the ones `shared/reference/realnode.md` found by hand; each is explained where it is set.

The node is tainted (`TAINT`) so that only pods that ask for it land here: the rest of the suite expects kwok to
make its pods Ready without running them, which a real kubelet would not do for images it does not have. It
advertises `GPUS` `nvidia.com/gpu` so that rendered engine pods schedule onto it and run CPU engines.

Only one real node can exist on a machine (one bridge, one set of kube-proxy rules, DNS on the bridge address):
`claim` records which cluster owns it and refuses a second one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import yaml

from . import kubeapi, network, sandbox_image
from .components import LOOPBACK, Addresses, Component, Layout, Ports, fetch_ok
from .config import BinDir, read_versions
from .image_store import UNUSED_PLUGINS, acquire_store_lock, image_store, release_store_lock
from .kubeapi import Api
from .pki import REAL_NODE_NAME

NODE_NAME = REAL_NODE_NAME
LABEL = ("disagg.dev/e2e-node", "real")
TAINT = {"key": "disagg.dev/e2e-node", "value": "real", "effect": "NoSchedule"}
# What engine pods request (one per TP rank). Enough for every small test deployment of simulated engines at once
# (e2e/test_router_configs.py runs 14 side by side); real vLLM CPU engines are limited by the node's real CPU and
# memory instead, which the kubelet reports as they are.
GPUS = 64
CLUSTER_DOMAIN = "cluster.local"
OWNER_FILE = Path("/run/disagg-e2e/real-node-owner")
REGISTER_TIMEOUT_SECONDS = 90.0
CNI_NETWORK = "disagg-e2e"


class NodePaths:
    def __init__(self, lay: Layout) -> None:
        self.dir = lay.node_dir
        self.socket = self.dir / "containerd.sock"
        self.containerd_config = self.dir / "containerd.toml"
        self.containerd_state = self.dir / "containerd-state"
        self.cni_conf_dir = self.dir / "net.d"
        self.cni_ipam_dir = self.dir / "cni-ipam"
        self.kubelet_root = self.dir / "kubelet"
        self.kubelet_config = self.dir / "kubelet.yaml"
        self.kube_proxy_config = self.dir / "kube-proxy.yaml"
        self.corefile = self.dir / "Corefile"
        self.crictl_config = self.dir / "crictl.yaml"

    @property
    def runtime_endpoint(self) -> str:
        return f"unix://{self.socket}"


# ---- ownership -----------------------------------------------------------------------------------------------


def owner() -> Path | None:
    try:
        return Path(OWNER_FILE.read_text().strip())
    except OSError:
        return None


def claim(root: Path, owner_alive: bool) -> None:
    """Record `root` as the cluster owning the machine's real node; refuse if a live cluster holds it."""
    current = owner()
    if current is not None and current != root and owner_alive:
        raise NodeError(
            f"the machine's real node belongs to the running cluster in {current}; stop it "
            f"(DISAGG_E2E_STATE={current} python -m e2e.localcluster down) or start this one without a real "
            "node (--without-real-node, or DISAGG_E2E_REAL_NODE=0)"
        )
    OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    OWNER_FILE.write_text(str(root))


def release(root: Path) -> None:
    if owner() == root:
        OWNER_FILE.unlink(missing_ok=True)


class NodeError(RuntimeError):
    pass


# ---- containerd ------------------------------------------------------------------------------------------------


def _containerd_config(paths: NodePaths, bins: BinDir) -> str:
    pause = read_versions()["PAUSE_IMAGE"]
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{image_store()}"
state = "{paths.containerd_state}"
# Only what the kubelet's CRI needs.
disabled_plugins = {json.dumps(list(UNUSED_PLUGINS))}

[grpc]
  address = "{paths.socket}"

[ttrpc]
  address = "{paths.socket}.ttrpc"

[{cri}]
  sandbox_image = "{pause}"
  # The sandbox cannot lower its oom_score_adj on this kind of machine; without the clamp every sandbox fails with
  # "runc create failed: ... can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{bins.path / "cni"}"
    conf_dir = "{paths.cni_conf_dir}"
    max_conf_num = 1
"""


def _cni_config(paths: NodePaths) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": network.BRIDGE,
                "isGateway": True,
                # A default route through the bridge address: Service IPs (kube-proxy) and kwok's pod range are
                # reached through the host; the guard in network.py stops anything meant for beyond it.
                "isDefaultGateway": True,
                # Nothing leaves the machine, so no source NAT; the host reaches pod addresses directly.
                "ipMasq": False,
                # A pod reaching itself through a Service comes back over its own bridge port.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": network.POD_CIDR, "rangeStart": "198.18.0.10", "gateway": network.NODE_IP}]],
                    "dataDir": str(paths.cni_ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def ctr(paths: NodePaths, *args: str, stdin: bytes | None = None, timeout: float = 600) -> bytes:
    done = subprocess.run(
        ["ctr", "--address", str(paths.socket), "--namespace", "k8s.io", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise NodeError(f"ctr {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def image_ids(paths: NodePaths) -> dict[str, str]:
    """Reference -> config digest (the image id) of every image in the node's store."""
    out = ctr(paths, "images", "ls").decode()
    found: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3:
            found[parts[0]] = parts[2]
    return found


def _import_sandbox_image(paths: NodePaths, bins: BinDir) -> None:
    reference = read_versions()["PAUSE_IMAGE"]
    data, _ = sandbox_image.archive(bins.binary("pause"), reference)
    # Re-importing the same bytes is cheap and idempotent; it also repairs a store whose image went missing.
    ctr(paths, "images", "import", "-", stdin=data)
    ctr(paths, "images", "label", reference, "io.cri-containerd.pinned=pinned")


def containerd(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    paths = NodePaths(lay)
    held: list[IO[str]] = []

    def prepare() -> None:
        # Until it answers: a background import (image_store.open_store) may hold the store with a containerd of
        # its own; after, such an import goes through this containerd's socket. If it never answers, `up` fails and
        # the lock goes with the process that ran it.
        held.append(acquire_store_lock(say=_say_waiting))
        paths.dir.mkdir(parents=True, exist_ok=True)
        image_store().mkdir(parents=True, exist_ok=True)
        paths.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(_containerd_config(paths, bins))
        (paths.cni_conf_dir / "10-disagg-e2e.conflist").write_text(json.dumps(_cni_config(paths), indent=2))

    def ready() -> bool:
        if not paths.socket.exists():
            return False
        try:
            ctr(paths, "version", timeout=5)
        except (NodeError, subprocess.TimeoutExpired):
            return False
        return True

    def finish() -> None:
        release_store_lock(held.pop())
        _import_sandbox_image(paths, bins)

    argv = [_which("containerd"), "--config", str(paths.containerd_config)]
    return Component("containerd", argv, ready, 60, prepare=prepare, finish=finish)


def _say_waiting(message: str) -> None:
    print(f"[real node] {message}", file=sys.stderr, flush=True)


def _which(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise NodeError(f"{program} not found; on Debian: apt-get install containerd runc")
    return found


# ---- kubelet ---------------------------------------------------------------------------------------------------


def _kubelet_config(lay: Layout, paths: NodePaths, ports: Ports) -> dict[str, object]:
    pki = lay.pki
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.NODE_IP,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": str(pki.kubelet_serving_cert),
        "tlsPrivateKeyFile": str(pki.kubelet_serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": paths.runtime_endpoint,
        # This kind of machine has cgroup v1 without systemd: a kubelet refuses to start on cgroup v1 unless told,
        # cannot build the QoS cgroup tree or enforce node allocatable there, and sees swap.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "localStorageCapacityIsolation": False,
        "clusterDNS": [network.NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        # Images cannot be pulled again, so the kubelet must never collect them; and a test machine's disk may be
        # fuller than the default eviction thresholds assume.
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "registerWithTaints": [TAINT],
        "shutdownGracePeriod": "0s",
        "maxPods": 110,
    }


def kubelet(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    paths = NodePaths(lay)
    key, value = LABEL
    argv = [
        str(bins.binary("kubelet")),
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={lay.component_kubeconfig('kubelet')}",
        f"--root-dir={paths.kubelet_root}",
        f"--cert-dir={paths.kubelet_root / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={network.NODE_IP}",
        f"--node-labels={key}={value}",
        "--v=1",
    ]

    def prepare() -> None:
        paths.kubelet_root.mkdir(parents=True, exist_ok=True)
        paths.kubelet_config.write_text(yaml.safe_dump(_kubelet_config(lay, paths, ports)))

    def finish() -> None:
        api = Api(f"https://{addrs.api_host}:{ports.apiserver}", lay.pki)
        _advertise_gpus(api)

    url = f"http://{LOOPBACK}:{ports.kubelet_healthz}/healthz"
    return Component("kubelet", argv, lambda: fetch_ok(url), 90, prepare=prepare, finish=finish)


def _advertise_gpus(api: Api) -> None:
    """Wait for the node to register, then add the extended resource to its capacity (kept by the kubelet)."""
    deadline = time.monotonic() + REGISTER_TIMEOUT_SECONDS
    path = f"/api/v1/nodes/{NODE_NAME}"
    while True:
        try:
            api.get(path)
            break
        except kubeapi.ApiError as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(GPUS)}]
    api.json_patch(f"{path}/status", patch)


# ---- kube-proxy and DNS ----------------------------------------------------------------------------------------


def _kube_proxy_config(lay: Layout, ports: Ports) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(lay.component_kubeconfig("kube-proxy"))},
        "hostnameOverride": NODE_NAME,
        "bindAddress": network.NODE_IP,
        "healthzBindAddress": f"{LOOPBACK}:{ports.kube_proxy_healthz}",
        "metricsBindAddress": f"{LOOPBACK}:{ports.kube_proxy_metrics}",
        "mode": "iptables",
        "clusterCIDR": network.CLUSTER_CIDR,
        "detectLocalMode": "ClusterCIDR",
        # NodePorts only on the bridge address, never on the machine's own network.
        "nodePortAddresses": [f"{network.NODE_IP}/32"],
        # Leave the host's conntrack sysctls alone (zero means "do not set").
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"minSyncPeriod": "1s", "syncPeriod": "30s"},
    }


def kube_proxy(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    paths = NodePaths(lay)
    argv = [str(bins.binary("kube-proxy")), f"--config={paths.kube_proxy_config}", "--v=1"]

    def prepare() -> None:
        paths.dir.mkdir(parents=True, exist_ok=True)
        paths.kube_proxy_config.write_text(yaml.safe_dump(_kube_proxy_config(lay, ports)))

    def ready() -> bool:
        return kubeapi.fetch(f"http://{LOOPBACK}:{ports.kube_proxy_healthz}/healthz") is not None

    return Component("kube-proxy", argv, ready, 60, prepare=prepare)


def _corefile(lay: Layout, ports: Ports) -> str:
    # No `forward`: names outside the cluster are not answered, so nothing in a pod can reach another machine by
    # name.
    return f"""\
{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {network.NODE_IP}
    errors
    ready {LOOPBACK}:{ports.coredns_ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {lay.component_kubeconfig("coredns")}
        pods insecure
        ttl 5
    }}
    cache 5
}}
.:53 {{
    bind {network.NODE_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def coredns(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    paths = NodePaths(lay)
    argv = [str(bins.binary("coredns")), "-conf", str(paths.corefile)]

    def prepare() -> None:
        paths.dir.mkdir(parents=True, exist_ok=True)
        paths.corefile.write_text(_corefile(lay, ports))

    url = f"http://{LOOPBACK}:{ports.coredns_ready}/ready"
    return Component("coredns", argv, lambda: kubeapi.fetch(url) is not None, 60, prepare=prepare)


NODE_FACTORIES = (containerd, kubelet, kube_proxy, coredns)
NODE_COMPONENTS = frozenset(f.__name__.replace("_", "-") for f in NODE_FACTORIES)


# ---- stopping --------------------------------------------------------------------------------------------------


def remove_pods(lay: Layout, bins: BinDir) -> str:
    """Stop and remove every pod sandbox through the CRI, which also releases its network (CNI DEL)."""
    paths = NodePaths(lay)
    if not paths.socket.exists():
        return "no containerd socket"
    paths.crictl_config.write_text(f"runtime-endpoint: {paths.runtime_endpoint}\ntimeout: 60\n")
    done = subprocess.run(
        [str(bins.binary("crictl")), f"--config={paths.crictl_config}", "rmp", "--all", "--force"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return (done.stdout + done.stderr).strip()


def cleanup_proxy_rules(bins: BinDir) -> None:
    subprocess.run([str(bins.binary("kube-proxy")), "--cleanup"], capture_output=True, timeout=60, check=False)


def unmount_below(directory: Path) -> list[str]:
    """Lazily unmount everything mounted below `directory` (pod volumes, rootfs), deepest first."""
    prefix = str(directory.resolve()) + os.sep
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].encode().decode("unicode_escape")
            if target.startswith(prefix):
                mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)
    return mounts
