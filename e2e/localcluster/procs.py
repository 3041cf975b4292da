"""Starting, identifying and stopping the control-plane processes.

A PID alone is not an identity: after a crash or reboot the number can belong
to an unrelated process. Each record therefore also keeps the kernel's start
time of the process (/proc/<pid>/stat field 22), and a signal is only sent
when both match.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TERM_GRACE_SECONDS = 10.0
KILL_GRACE_SECONDS = 5.0

# Popen objects of processes this interpreter started, so exited children are
# reaped (otherwise they linger as zombies that still look present in /proc).
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks, "argv": list(self.argv)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(str(data["name"]), int(data["pid"]), int(data["start_ticks"]), tuple(data["argv"]))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    # After "comm", field 3 (state) is index 0, so field 22 is index 19.
    return int(fields[19]) if fields else None


def is_alive(record: ProcessRecord) -> bool:
    child = _children.get(record.pid)
    if child is not None and child.poll() is not None:
        return False
    fields = _stat_fields(record.pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return int(fields[19]) == record.start_ticks


def start(name: str, argv: Sequence[str], log_path: Path) -> ProcessRecord:
    """Start `argv` detached from our session, output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        # A new session keeps Ctrl-C in the invoking terminal from killing the
        # cluster, and lets it outlive `python -m e2e.localcluster up`.
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    ticks = start_ticks(proc.pid)
    if ticks is None:
        raise RuntimeError(f"{name} exited immediately; see {log_path}")
    return ProcessRecord(name, proc.pid, ticks, tuple(argv))


def _signal(record: ProcessRecord, sig: signal.Signals) -> None:
    if is_alive(record):
        with contextlib.suppress(ProcessLookupError):  # exited meanwhile
            os.kill(record.pid, sig)


def _wait_all(records: Iterable[ProcessRecord], seconds: float) -> list[ProcessRecord]:
    deadline = time.monotonic() + seconds
    remaining = [r for r in records if is_alive(r)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.1)
        remaining = [r for r in remaining if is_alive(r)]
    return remaining


def terminate(records: Sequence[ProcessRecord]) -> list[ProcessRecord]:
    """Stop processes one at a time in reverse start order.

    Each gets SIGTERM, then SIGKILL if still there after the grace period.
    One at a time because the apiserver's graceful shutdown stalls when etcd
    is already gone; clients stop before the servers they talk to.
    Returns the records that survived even SIGKILL (should be empty).
    """
    survivors: list[ProcessRecord] = []
    for record in reversed(records):
        _signal(record, signal.SIGTERM)
        if _wait_all([record], TERM_GRACE_SECONDS):
            _signal(record, signal.SIGKILL)
            survivors += _wait_all([record], KILL_GRACE_SECONDS)
        _children.pop(record.pid, None)
    return survivors


def strays(bin_dir: Path, state_dir: Path, programs: tuple[str, ...] = ()) -> list[ProcessRecord]:
    """Processes running one of our binaries (or `programs` in `bin_dir`) with our state dir in their argv.

    This finds leftovers even when the state file was lost (e.g. `up` was
    killed half-way), without ever matching unrelated processes by name.
    """
    found: list[ProcessRecord] = []
    bin_prefix = str(bin_dir.resolve()) + os.sep
    state = str(state_dir.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        record = _inspect(int(entry.name), bin_prefix, state, programs)
        if record is not None:
            found.append(record)
    return found


def descendants(parents: Sequence[ProcessRecord]) -> list[ProcessRecord]:
    """Every live process below `parents`, each after its parent (so `terminate`, which goes backwards, stops
    children before their parents)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[ProcessRecord] = []
    todo = [p.pid for p in parents]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            ticks = start_ticks(child)
            if ticks is not None:
                found.append(ProcessRecord(f"pid-{child}", child, ticks, ()))
                todo.append(child)
    return found


def _inspect(pid: int, bin_prefix: str, state: str, programs: tuple[str, ...] = ()) -> ProcessRecord | None:
    try:
        exe = str(Path(f"/proc/{pid}/exe").readlink())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    args = tuple(a.decode(errors="replace") for a in argv if a)
    ours = exe.startswith(bin_prefix) and (not programs or Path(exe).name in programs)
    if not ours or not any(state in a for a in args):
        return None
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    return ProcessRecord(Path(exe).name, pid, ticks, args)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
