"""Bring the local control plane up and down, and report on it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import components, kubeconfig, lws, network, nodes, pki, procs, realnode
from .components import Addresses, Component, Layout, Ports
from .config import BUILD_SCRIPT, BinDir
from .kubeapi import Api, ApiError

Say = Callable[[str], None]

NODES_TIMEOUT_SECONDS = 60.0
SA_TIMEOUT_SECONDS = 60.0


class ClusterError(RuntimeError):
    pass


@dataclass
class State:
    """What `up` started, persisted so that another process can stop it."""

    root: Path
    bin_dir: Path
    ports: Ports
    addrs: Addresses
    components: list[str] = field(default_factory=list)  # names, in start order
    processes: list[procs.ProcessRecord] = field(default_factory=list)
    started_at: float = 0.0
    # Host settings the real node changed, restored by `down`.
    previous_sysctls: dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        return Layout(self.root)

    def save(self) -> None:
        data = {
            "bin_dir": str(self.bin_dir),
            "ports": self.ports.to_json(),
            "addrs": self.addrs.to_json(),
            "previous_sysctls": self.previous_sysctls,
            "components": self.components,
            "processes": [p.to_json() for p in self.processes],
            "started_at": self.started_at,
        }
        tmp = self.layout.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.layout.state_file)

    @classmethod
    def load(cls, root: Path) -> State | None:
        path = Layout(root).state_file
        if not path.is_file():
            return None
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return cls(
                root=root,
                bin_dir=Path(data["bin_dir"]),
                ports=Ports.from_json(data["ports"]),
                addrs=Addresses.from_json(data["addrs"]),
                previous_sysctls=dict(data.get("previous_sysctls") or {}),
                components=list(data["components"]),
                processes=[procs.ProcessRecord.from_json(p) for p in data["processes"]],
                started_at=float(data["started_at"]),
            )
        except (ValueError, KeyError, TypeError):
            # Written by another version of this code: treat as unknown; its
            # processes are still found and stopped via procs.strays().
            return None

    @property
    def server(self) -> str:
        return components.apiserver_url(self.addrs, self.ports)

    def api(self) -> Api:
        return Api(self.server, self.layout.pki)


def _owned(root: Path) -> bool:
    """Only directories we created may be wiped (DISAGG_E2E_STATE is user input)."""
    return Layout(root).marker.is_file()


def healthy(state: State) -> bool:
    complete = [p.name for p in state.processes] == state.components
    alive = all(procs.is_alive(p) for p in state.processes)
    return complete and alive and components.apiserver_ready(state.layout.pki, state.addrs, state.ports)


def ensure_binaries(bins: BinDir, say: Say) -> None:
    if bins.is_complete():
        return
    say(f"binaries missing in {bins.path}; running {BUILD_SCRIPT} (cold build: 15-25 min on 2 cores)")
    subprocess.run([str(BUILD_SCRIPT)], check=True)
    if not bins.is_complete():
        raise ClusterError(f"{BUILD_SCRIPT} finished but {bins.path} is incomplete")


def _factories(with_lws: bool, with_real_node: bool) -> list[components.Factory]:
    return [
        *components.CORE,
        *([lws.component] if with_lws else []),
        *(realnode.NODE_FACTORIES if with_real_node else ()),
    ]


def _claim_real_node(root: Path) -> None:
    missing = network.prerequisites()
    if missing:
        raise ClusterError(
            "cannot start the real node; missing: " + "; ".join(missing) + ". Install them (`make node-packages`) "
            "or start without a real node (--without-real-node, or DISAGG_E2E_REAL_NODE=0)"
        )
    holder = realnode.owner()
    holder_state = State.load(holder) if holder is not None and holder != root else None
    try:
        realnode.claim(root, owner_alive=holder_state is not None and healthy(holder_state))
    except realnode.NodeError as err:
        raise ClusterError(str(err)) from err


def _prepare(root: Path, bins: BinDir, say: Say, with_real_node: bool) -> State:
    if root.exists():
        if not _owned(root) and any(root.iterdir()):
            raise ClusterError(f"{root} exists, is not empty and was not created by localcluster")
        _stop(root, bins, say)
    if with_real_node:
        _claim_real_node(root)
    layout = Layout(root)
    root.mkdir(parents=True, exist_ok=True)
    layout.marker.touch()
    generated = pki.generate(layout.pki.dir)
    ports = Ports.pick()
    addrs = Addresses.with_real_node() if with_real_node else Addresses.loopback()
    state = State(root, bins.path, ports, addrs, started_at=time.time())
    if with_real_node:
        # Before the API server starts: it listens on the bridge address.
        state.previous_sysctls = network.setup()
        state.save()
    kubeconfig.write(layout.kubeconfig, state.server, generated, "admin")
    clients = ["controller-manager", "scheduler", "kwok", "lws"]
    if with_real_node:
        clients += ["kubelet", "kube-proxy", "coredns"]
    for client in clients:
        kubeconfig.write(layout.component_kubeconfig(client), state.server, generated, client)
    return state


def _wait(comp: Component, record: procs.ProcessRecord, log: Path) -> None:
    deadline = time.monotonic() + comp.timeout_seconds
    while not comp.ready():
        if not procs.is_alive(record):
            raise ClusterError(f"{comp.name} exited during start-up; log tail:\n{procs.log_tail(log)}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{comp.name} not ready after {comp.timeout_seconds:.0f}s; log tail:\n{procs.log_tail(log)}"
            )
        time.sleep(0.2)


def _start_all(state: State, bins: BinDir, factories: list[components.Factory], say: Say) -> None:
    layout = state.layout
    comps = [factory(bins, layout, state.ports, state.addrs) for factory in factories]
    state.components = [c.name for c in comps]
    for comp in comps:
        t0 = time.monotonic()
        comp.prepare()
        record = procs.start(comp.name, comp.argv, layout.log(comp.name))
        state.processes.append(record)
        state.save()  # after every start, so `down` can clean up a failed `up`
        _wait(comp, record, layout.log(comp.name))
        comp.finish()
        say(f"{comp.name} ready (pid {record.pid}, {time.monotonic() - t0:.1f}s)")


def _wait_default_service_account(api: Api) -> None:
    # Created by the controller-manager; pods cannot be created before it exists.
    deadline = time.monotonic() + SA_TIMEOUT_SECONDS
    while True:
        try:
            api.get("/api/v1/namespaces/default/serviceaccounts/default")
            return
        except ApiError as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _register_nodes(state: State, say: Say) -> None:
    api = state.api()
    manifests = nodes.load()
    created = nodes.register(api, manifests)
    names = {m["metadata"]["name"] for m in manifests}
    nodes.wait_ready(api, names, NODES_TIMEOUT_SECONDS)
    say(f"{len(names)} fake nodes Ready ({created} registered now)")
    if state.addrs.real_node:
        nodes.wait_ready(api, {realnode.NODE_NAME}, NODES_TIMEOUT_SECONDS)
        say(f"real node {realnode.NODE_NAME} Ready ({realnode.GPUS} nvidia.com/gpu advertised)")
    _wait_default_service_account(api)
    say("default/default ServiceAccount exists")


def up(root: Path, bins: BinDir, say: Say, with_lws: bool = True, with_real_node: bool = True) -> State:
    """Start the cluster unless a healthy one is already running in `root`.

    with_lws: also run the LeaderWorkerSet controller (CRDs + webhooks).
    with_real_node: also run the real worker node (realnode.py); needs root, containerd and runc.
    """
    root = root.resolve()
    existing = State.load(root)
    if existing is not None and healthy(existing) and existing.addrs.real_node == with_real_node:
        say(f"already running (apiserver {existing.server})")
        return existing
    ensure_binaries(bins, say)
    t0 = time.monotonic()
    state = _prepare(root, bins, say, with_real_node)
    try:
        _start_all(state, bins, _factories(with_lws, with_real_node), say)
        _register_nodes(state, say)
    except BaseException:
        say(f"start-up failed; stopping what was started (logs kept in {state.layout.root / 'logs'})")
        _stop_node(state, bins, say)
        procs.terminate(state.processes)
        raise
    say(f"cluster up in {time.monotonic() - t0:.1f}s; kubeconfig: {state.layout.kubeconfig}")
    return state


def _stop_node(state: State, bins: BinDir, say: Say) -> None:
    """Stop the real node before the control plane: kubelet, then every pod, then the rest of the node."""
    by_name = {r.name: r for r in state.processes}
    if "kubelet" in by_name:
        procs.terminate([by_name["kubelet"]])  # or it would restart the pods removed next
    if "containerd" in by_name and procs.is_alive(by_name["containerd"]):
        say(f"removing the real node's pods: {realnode.remove_pods(state.layout, bins) or 'none'}")
    node = [r for r in state.processes if r.name in realnode.NODE_COMPONENTS]
    procs.terminate(node)
    # Shims (and the containers under them) outlive containerd; find them by our socket in their argv.
    shims = procs.strays(Path("/usr/bin"), state.layout.node_dir, programs=("containerd-shim-runc-v2",))
    if shims:
        say(f"stopping {len(shims)} leftover container shim(s) and their containers")
        procs.terminate([*shims, *procs.descendants(shims)])
    if state.addrs.real_node:
        realnode.cleanup_proxy_rules(bins)
        realnode.unmount_below(state.layout.node_dir)
        network.teardown(state.previous_sysctls)
        realnode.release(state.root)


def _stop(root: Path, bins: BinDir, say: Say) -> None:
    """Terminate recorded processes plus any stray ones of ours; wipe `root`."""
    bin_dir = bins.path
    state = State.load(root)
    records = state.processes if state else []
    if state is not None:
        bin_dir = state.bin_dir
        _stop_node(state, BinDir(bin_dir), say)
    known = {(r.pid, r.start_ticks) for r in records}
    extra = [s for s in _strays(bin_dir, root) if (s.pid, s.start_ticks) not in known]
    if extra:
        say(f"also stopping {len(extra)} unrecorded process(es): {[(s.name, s.pid) for s in extra]}")
    survivors = procs.terminate([*records, *extra])
    left = survivors + _strays(bin_dir, root)
    if left:
        raise ClusterError(f"processes survived SIGKILL: {[(p.name, p.pid) for p in left]}")
    if root.exists() and _owned(root):
        realnode.unmount_below(root)
        shutil.rmtree(root)


def _strays(bin_dir: Path, root: Path) -> list[procs.ProcessRecord]:
    # containerd and its shims are Debian's binaries, not ours; they carry the state dir in their argv too.
    return [
        *procs.strays(bin_dir, root),
        *procs.strays(Path("/usr/bin"), root, programs=("containerd", "containerd-shim-runc-v2")),
    ]


def down(root: Path, bins: BinDir, say: Say) -> None:
    root = root.resolve()
    if not root.exists():
        say("not running (no state directory)")
        return
    if not _owned(root):
        raise ClusterError(f"{root} was not created by localcluster; refusing to touch it")
    _stop(root, bins, say)
    say(f"stopped; removed {root}")


@dataclass(frozen=True)
class Report:
    running: bool
    lines: list[str]


def status(root: Path) -> Report:
    root = root.resolve()
    state = State.load(root)
    if state is None:
        return Report(False, [f"not running (no usable state in {root})"])
    lines = [f"state: {root}", f"apiserver: {state.server}", f"real node: {'yes' if state.addrs.real_node else 'no'}"]
    for p in state.processes:
        lines.append(f"  {p.name:<24} pid {p.pid:<8} {'running' if procs.is_alive(p) else 'DEAD'}")
    ok = healthy(state)
    if ok:
        items = state.api().get("/api/v1/nodes")["items"]
        ready = sum(nodes.is_ready(n) for n in items)
        lines.append(f"nodes: {ready}/{len(items)} Ready")
        lines.append(f"up for {time.time() - state.started_at:.0f}s")
    lines.append("healthy" if ok else "UNHEALTHY (run `down` then `up`)")
    return Report(ok, lines)


def env_lines(root: Path, bins: BinDir) -> list[str]:
    kubeconfig_path = Layout(root.resolve()).kubeconfig
    return [f"export KUBECONFIG={kubeconfig_path}", f'export PATH="{bins.path}:$PATH"']
