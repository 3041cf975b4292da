"""The host network of a cluster with a real node: one bridge for real pods, one local range for kwok's pods.

Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmarking, which no machine network here
uses:

* `198.18.0.0/16` is the real node's pod network: the `disagg0` bridge holds `198.18.0.1`, which is also the
  node's InternalIP, the API server's address and cluster DNS. Real pods get addresses from the CNI bridge
  plugin's host-local IPAM; the host reaches them directly over the bridge.
* `198.19.0.0/16` is kwok's pod range, assigned to `lo`. Linux answers on every address of a prefix given to `lo`,
  so a test can serve a fake pod's endpoints (simulated vLLM `/metrics`) at exactly its IP, and real pods reach
  those addresses through the bridge. Unlike loopback addresses, EndpointSlices accept them, so Services get
  endpoints for fake and real pods alike.

Forwarding is needed for Service traffic (kube-proxy DNATs a ClusterIP to a pod on the same bridge), so it is
turned on; a guard rule keeps anything from the pod network from being forwarded to another interface, so pods
reach each other and the host and nothing else.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .pki import NODE_IP as NODE_IP

BRIDGE = "disagg0"
POD_CIDR = "198.18.0.0/16"
# The range kwok hands to fake pods. Must not overlap POD_CIDR or the service range.
KWOK_POD_CIDR = "198.19.0.0/16"
KWOK_LOCAL_ADDRESS = "198.19.0.1/16"
# Both pod ranges, for kube-proxy's notion of "traffic from inside the cluster".
CLUSTER_CIDR = "198.18.0.0/15"
GUARD_CHAIN = "DISAGG-E2E-GUARD"
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    # Bridged pod-to-pod traffic must pass iptables, or a Service whose endpoint sits on the same bridge as the
    # client never gets its reply un-NATed.
    "net/bridge/bridge-nf-call-iptables": "1",
}


class NetworkError(RuntimeError):
    pass


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done


def _has_address(device: str, cidr: str) -> bool:
    out = _run("ip", "-o", "addr", "show", "dev", device, check=False).stdout
    return f" {cidr} " in out


def _link_exists(device: str) -> bool:
    return _run("ip", "link", "show", device, check=False).returncode == 0


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run("iptables", "-w", "5", *args, check=check)


@dataclass(frozen=True)
class Sysctl:
    key: str

    @property
    def path(self) -> Path:
        return Path("/proc/sys") / self.key

    def read(self) -> str:
        return self.path.read_text().strip()

    def write(self, value: str) -> None:
        self.path.write_text(value)


def prerequisites() -> list[str]:
    """What this machine lacks for a real node (empty when it has everything)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the node creates a bridge, iptables rules and containers)")
    for tool in ("ip", "iptables", "containerd", "containerd-shim-runc-v2", "runc", "ctr"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian: apt-get install containerd runc iproute2 iptables)")
    if not Sysctl("net/bridge/bridge-nf-call-iptables").path.exists():
        missing.append("the br_netfilter kernel module (modprobe br_netfilter)")
    return missing


def setup() -> dict[str, str]:
    """Create the bridge, the kwok range and the guard; returns the sysctl values it replaced."""
    if not _link_exists(BRIDGE):
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    gateway = f"{NODE_IP}/{ipaddress.ip_network(POD_CIDR).prefixlen}"
    if not _has_address(BRIDGE, gateway):
        _run("ip", "addr", "add", gateway, "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    if not _has_address("lo", KWOK_LOCAL_ADDRESS):
        _run("ip", "addr", "add", KWOK_LOCAL_ADDRESS, "dev", "lo")
    previous = {}
    for key, value in SYSCTLS.items():
        sysctl = Sysctl(key)
        previous[key] = sysctl.read()
        sysctl.write(value)
    _install_guard()
    return previous


def _install_guard() -> None:
    if _iptables("-n", "-L", GUARD_CHAIN, check=False).returncode != 0:
        _iptables("-N", GUARD_CHAIN)
    _iptables("-F", GUARD_CHAIN)
    # Pod traffic stays on the bridge (pod to pod, pod to Service); replies to the host are not forwarded at all.
    _iptables("-A", GUARD_CHAIN, "-i", BRIDGE, "-o", BRIDGE, "-j", "RETURN")
    _iptables("-A", GUARD_CHAIN, "-i", BRIDGE, "-j", "DROP")
    _iptables("-A", GUARD_CHAIN, "-o", BRIDGE, "!", "-s", CLUSTER_CIDR, "-j", "DROP")
    if _iptables("-C", "FORWARD", "-j", GUARD_CHAIN, check=False).returncode != 0:
        _iptables("-I", "FORWARD", "1", "-j", GUARD_CHAIN)


# The kubelet's own chains: a canary it watches for flushes, and a rule dropping non-loopback traffic to 127/8.
KUBELET_CHAINS = {
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "mangle": ("KUBE-KUBELET-CANARY",),
}


def _remove_kubelet_chains() -> None:
    for builtin in ("INPUT", "OUTPUT"):
        _iptables("-D", builtin, "-j", "KUBE-FIREWALL", check=False)
    for table, chains in KUBELET_CHAINS.items():
        for chain in chains:
            _iptables("-t", table, "-F", chain, check=False)
            _iptables("-t", table, "-X", chain, check=False)


def teardown(previous_sysctls: dict[str, str]) -> None:
    """Undo `setup` and what the kubelet added (best effort: each step runs even if an earlier one failed)."""
    _remove_kubelet_chains()
    _iptables("-D", "FORWARD", "-j", GUARD_CHAIN, check=False)
    _iptables("-F", GUARD_CHAIN, check=False)
    _iptables("-X", GUARD_CHAIN, check=False)
    for key, value in previous_sysctls.items():
        with contextlib.suppress(OSError):
            Sysctl(key).write(value)
    _run("ip", "addr", "del", KWOK_LOCAL_ADDRESS, "dev", "lo", check=False)
    _run("ip", "link", "del", BRIDGE, check=False)
