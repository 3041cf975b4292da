"""A private Docker Engine for building the project's images, started and stopped by the harness.

It keeps everything under the cache (`<cache>/docker/`): data root, exec root, its own socket, pid file, log and
an empty daemon config, so it never reads /etc/docker/daemon.json, never shares state with a system dockerd and
never touches the host's network: no default bridge, no iptables rules, no ip_forward sysctl. Containers and builds
use `--network host`; nothing is ever pulled (the base image is made locally, see `base.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.localcluster import procs
from e2e.localcluster.config import cache_root

from . import host

# Unix socket paths are limited to 107 bytes; containerd's socket is the deepest one dockerd creates.
_SUN_PATH_MAX = 107
_CONTAINERD_SOCKET = Path("containerd") / "containerd.sock"
READY_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 60.0
# Debian's client matches Debian's daemon (20.10); a newer `docker` elsewhere on PATH would default to BuildKit.
DEBIAN_CLIENT = Path("/usr/bin/docker")


class DockerdError(RuntimeError):
    pass


@dataclass(frozen=True)
class DockerdPaths:
    """Where the private daemon keeps its files."""

    root: Path

    @classmethod
    def default(cls) -> DockerdPaths:
        return cls(cache_root() / "docker")

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def exec_root(self) -> Path:
        return self.root / "run"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def log(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def state(self) -> Path:
        return self.root / "dockerd.json"

    @property
    def config_file(self) -> Path:
        return self.root / "daemon.json"

    @property
    def client_config(self) -> Path:
        return self.root / "client"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"


def dockerd_argv(paths: DockerdPaths, dockerd: str = "dockerd") -> list[str]:
    """The daemon's command line: isolated from any system dockerd and from the host's network configuration."""
    return [
        dockerd,
        f"--host={paths.host}",
        f"--data-root={paths.data_root}",
        f"--exec-root={paths.exec_root}",
        f"--pidfile={paths.pidfile}",
        f"--config-file={paths.config_file}",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=false",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        "--log-level=warn",
    ]


def client_env(paths: DockerdPaths, base: Mapping[str, str]) -> dict[str, str]:
    """Environment for `docker` commands against the private daemon.

    The classic builder (DOCKER_BUILDKIT=0) because BuildKit would try to pull the `# syntax=` frontend image;
    a private DOCKER_CONFIG so the user's credential helpers and contexts are never consulted.
    """
    env = {k: v for k, v in base.items() if k not in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    env.update(DOCKER_HOST=paths.host, DOCKER_BUILDKIT="0", DOCKER_CONFIG=str(paths.client_config))
    return env


def check_paths(paths: DockerdPaths) -> None:
    """Refuse a cache directory so deep that dockerd's sockets would not fit in a unix socket address."""
    for sock in (paths.socket, paths.exec_root / _CONTAINERD_SOCKET):
        if len(str(sock).encode()) > _SUN_PATH_MAX:
            raise DockerdError(
                f"{sock} is longer than {_SUN_PATH_MAX} bytes, too long for a unix socket; "
                "set DISAGG_CACHE_DIR to a shorter directory"
            )


def mounts_under(mountinfo: str, root: Path) -> list[str]:
    """Mount points (from /proc/self/mountinfo text) at or below `root`, deepest first."""
    prefix = str(root).rstrip("/")
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def docker_client() -> str:
    if DEBIAN_CLIENT.is_file():
        return str(DEBIAN_CLIENT)
    found = shutil.which("docker")
    if found is None:
        raise DockerdError("no docker client; install Debian's docker.io (apt-get install docker.io)")
    return found


@dataclass(frozen=True)
class Status:
    running: bool
    pid: int | None
    detail: str


class Dockerd:
    """The private daemon: `up` reuses a running one of ours, `down` stops only the processes it recorded."""

    def __init__(self, paths: DockerdPaths | None = None) -> None:
        self.paths = paths or DockerdPaths.default()
        self.env = client_env(self.paths, os.environ)
        self._client: str | None = None

    @property
    def docker(self) -> str:
        """The client binary, looked up on first use (`up` installs it on a machine that has none)."""
        if self._client is None:
            self._client = docker_client()
        return self._client

    # ---- client ------------------------------------------------------------------------------------------------
    def run(
        self, args: Sequence[str], *, check: bool = True, timeout: float | None = 300.0
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.docker, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise DockerdError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def command(self, args: Sequence[str]) -> list[str]:
        return [self.docker, *args]

    def answers(self) -> bool:
        if not self.paths.socket.exists():
            return False
        try:
            proc = self.run(["version", "--format", "{{.Server.Version}}"], check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def _record(self) -> procs.ProcessRecord | None:
        try:
            record = procs.ProcessRecord.from_json(json.loads(self.paths.state.read_text()))
        except (OSError, ValueError, KeyError):
            return self._adopt()
        return record if procs.is_alive(record) else self._adopt()

    def _adopt(self) -> procs.ProcessRecord | None:
        """A daemon of ours whose state file is gone: its pid file names a dockerd with our data root.

        Starting a second daemon on the same data root instead would corrupt it.
        """
        try:
            pid = int(self.paths.pidfile.read_text().strip())
            argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        except (OSError, ValueError):
            return None
        ticks = procs.start_ticks(pid)
        if ticks is None or f"--data-root={self.paths.data_root}" not in argv:
            return None
        record = procs.ProcessRecord("dockerd", pid, ticks, tuple(argv))
        self.paths.state.write_text(json.dumps(record.to_json()))
        return record

    def status(self) -> Status:
        record = self._record()
        if record is None:
            return Status(False, None, "not running")
        if not self.answers():
            return Status(False, record.pid, f"process {record.pid} runs but {self.paths.socket} does not answer")
        return Status(True, record.pid, f"running (pid {record.pid}, {self.paths.host})")

    def up(self) -> Status:
        check_paths(self.paths)
        record = self._record()
        if record is not None:
            self._wait_ready(record)
            return self.status()
        try:
            host.ensure_packages()
        except host.HostError as exc:
            raise DockerdError(str(exc)) from exc
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise DockerdError("dockerd not found; install Debian's Docker Engine: apt-get install docker.io")
        for directory in (self.paths.root, self.paths.data_root, self.paths.exec_root, self.paths.client_config):
            directory.mkdir(parents=True, exist_ok=True)
        if not self.paths.config_file.exists():
            self.paths.config_file.write_text("{}\n")
        # A socket or pid file left by a killed daemon would make the new one refuse to start.
        self.paths.socket.unlink(missing_ok=True)
        self.paths.pidfile.unlink(missing_ok=True)
        record = procs.start("dockerd", dockerd_argv(self.paths, dockerd), self.paths.log)
        self.paths.state.write_text(json.dumps(record.to_json()))
        self._wait_ready(record)
        return self.status()

    def _wait_ready(self, record: procs.ProcessRecord) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if not procs.is_alive(record):
                raise DockerdError(f"dockerd exited; see {self.paths.log}:\n{procs.log_tail(self.paths.log)}")
            if self.answers():
                return
            time.sleep(0.5)
        raise DockerdError(
            f"dockerd did not answer on {self.paths.socket} within {READY_TIMEOUT_SECONDS:.0f} s; "
            f"see {self.paths.log}:\n{procs.log_tail(self.paths.log)}"
        )

    def down(self) -> Status:
        """SIGTERM the recorded daemon (it stops its containers and its containerd), SIGKILL after a grace."""
        record = self._record()
        if record is not None:
            os.kill(record.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
            while procs.is_alive(record) and time.monotonic() < deadline:
                time.sleep(0.2)
            if procs.is_alive(record):
                os.kill(record.pid, signal.SIGKILL)
        for stray in self._strays():
            os.kill(stray.pid, signal.SIGKILL)
        self._unmount()
        self.paths.state.unlink(missing_ok=True)
        return self.status()

    def _unmount(self) -> None:
        """dockerd leaves its network-namespace bind mount (exec root/netns/default) behind; without this the cache
        directory cannot be removed. Only mount points under our own root, deepest first."""
        for point in mounts_under(Path("/proc/self/mountinfo").read_text(), self.paths.root):
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)

    def _strays(self) -> list[procs.ProcessRecord]:
        """containerd and shims that outlived a killed dockerd: only processes whose argv names our exec root."""
        marker = str(self.paths.exec_root)
        found: list[procs.ProcessRecord] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            except OSError:
                continue
            if argv and Path(argv[0]).name.startswith("containerd") and any(marker in a for a in argv):
                ticks = procs.start_ticks(int(entry.name))
                if ticks is not None:
                    found.append(procs.ProcessRecord(Path(argv[0]).name, int(entry.name), ticks, tuple(argv)))
        return found
