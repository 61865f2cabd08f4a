"""Leak-proof teardown of namespace clusters: a state file per run, a watchdog process, a reaper.

Standard library only, so the watchdog can run as a plain script (``python -I reaper.py watch ...``)
that outlives a test process killed with SIGKILL. Every resource a run creates is recorded in its
state file *before* it is created; :func:`teardown` removes whatever of it exists, idempotently.

Three paths lead here:

* the normal one: ``Cluster.close()`` (fixture finalizer, ``with`` block, ``atexit``);
* the watchdog: a detached process per run that tears the run down when its owner dies, however it dies;
* the reaper: each new ``Cluster.create`` reaps runs whose owner and watchdog are both gone, and
  ``python -m tests.cluster.reaper reap`` does the same by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

__all__ = ["STATE_DIR", "RunState", "teardown", "reap_stale", "owner_alive", "process_start_time", "process_running", "global_lock"]

#: Where run state files live; one ``<run_id>.json`` per live run.
STATE_DIR = Path(os.environ.get("FTWIZ_CLUSTER_STATE_DIR", "/tmp/ftwiz-cluster-state"))

_KILL_GRACE_S = 3.0


@dataclasses.dataclass
class RunState:
    """Everything one cluster run created, so anyone can remove it later."""

    run_id: str
    owner_pid: int
    owner_start: Optional[str]
    tmpdir: str
    bridge: str = ""
    subnet: str = ""
    namespaces: list[str] = dataclasses.field(default_factory=list)
    host_veths: list[str] = dataclasses.field(default_factory=list)
    watchdog_pid: Optional[int] = None

    @property
    def path(self) -> Path:
        """The state file of this run."""
        return STATE_DIR / f"{self.run_id}.json"

    def save(self) -> None:
        """Write the state file atomically (write a temp file, then rename)."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1))
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, path: Path) -> "RunState":
        """Read a state file written by :meth:`save`."""
        data = json.loads(Path(path).read_text())
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def process_start_time(pid: int) -> Optional[str]:
    """The start time of ``pid`` in clock ticks (field 22 of /proc/PID/stat); None if it is gone.

    Together with the pid it names a process uniquely, so a reused pid is not mistaken for the owner.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def process_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a zombie holds no namespace, port or file)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def owner_alive(state: RunState) -> bool:
    """Whether the process that created this run still runs."""
    start = process_start_time(state.owner_pid)
    return start is not None and (state.owner_start is None or start == state.owner_start)


@contextlib.contextmanager
def global_lock() -> Iterator[None]:
    """Serialise subnet choice and stale reaping between concurrent runs on this machine."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def namespace_pids(netns: str) -> list[int]:
    """Pids of every process living in network namespace ``netns`` (empty if it does not exist)."""
    if not Path(f"/run/netns/{netns}").exists():
        return []
    out = _run(["ip", "netns", "pids", netns]).stdout
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def kill_namespace_processes(namespaces: list[str], grace_s: float = _KILL_GRACE_S) -> list[int]:
    """SIGTERM every process in ``namespaces``, SIGKILL what is left after ``grace_s``; return survivors.

    Only processes found *inside* our namespaces are signalled, so a reused pid elsewhere is never hit.
    """
    for pid in [p for ns in namespaces for p in namespace_pids(ns)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left: list[int] = []
    while time.monotonic() < deadline:
        left = [p for ns in namespaces for p in namespace_pids(ns)]
        if not left:
            return []
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    return [p for ns in namespaces for p in namespace_pids(ns)]


def teardown(state: RunState) -> list[str]:
    """Remove everything ``state`` records: processes, namespaces, veths, bridge, temp dir, state file.

    Safe to call twice and from two processes at once (a per-run lock serialises them). Returns the
    problems met (empty when everything is gone).
    """
    problems: list[str] = []
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / f"{state.run_id}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        survivors = kill_namespace_processes(state.namespaces)
        if survivors:
            problems.append(f"processes still alive in the namespaces after SIGKILL: {survivors}")
        for ns in state.namespaces:
            if Path(f"/run/netns/{ns}").exists():
                res = _run(["ip", "netns", "del", ns])
                if res.returncode != 0:
                    problems.append(f"ip netns del {ns}: {res.stderr.strip()}")
        for link in [*state.host_veths, state.bridge]:
            if link and Path(f"/sys/class/net/{link}").exists():
                res = _run(["ip", "link", "del", link])
                if res.returncode != 0 and Path(f"/sys/class/net/{link}").exists():
                    problems.append(f"ip link del {link}: {res.stderr.strip()}")
        if state.tmpdir and Path(state.tmpdir).exists():
            shutil.rmtree(state.tmpdir, ignore_errors=True)
            if Path(state.tmpdir).exists():
                problems.append(f"could not remove {state.tmpdir}")
        if not problems:
            with contextlib.suppress(FileNotFoundError):
                state.path.unlink()
    with contextlib.suppress(FileNotFoundError):
        (STATE_DIR / f"{state.run_id}.lock").unlink()
    return problems


def reap_stale(*, everything: bool = False) -> list[str]:
    """Tear down runs whose owner process is gone (all runs with ``everything``); return their ids."""
    reaped: list[str] = []
    if not STATE_DIR.exists():
        return reaped
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            state = RunState.load(path)
        except (OSError, ValueError, TypeError):
            continue
        if everything or not owner_alive(state):
            teardown(state)
            reaped.append(state.run_id)
    return reaped


def watch(state_path: Path, owner_pid: int, owner_start: Optional[str]) -> int:
    """Watchdog loop: when the owner dies (stdin closes or its pid goes), tear the run down if still there.

    The owner closes our stdin only after its own teardown, so a clean exit leaves nothing to do.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal ^C is for the owner, which cleans up itself
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
        start = process_start_time(owner_pid)
        if start is None or (owner_start is not None and start != owner_start):
            break
    if state_path.exists():
        try:
            state = RunState.load(state_path)
        except (OSError, ValueError, TypeError):
            return 1
        problems = teardown(state)
        for problem in problems:
            print(f"ftwiz cluster watchdog: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0


def main(argv: list[str]) -> int:
    """``watch STATE OWNER_PID OWNER_START`` (used by the harness) or ``reap [--all]`` (by hand)."""
    if argv[:1] == ["watch"] and len(argv) == 4:
        return watch(Path(argv[1]), int(argv[2]), None if argv[3] == "-" else argv[3])
    if argv[:1] == ["reap"]:
        reaped = reap_stale(everything="--all" in argv)
        print("reaped: " + (", ".join(reaped) if reaped else "nothing"))
        return 0
    print("usage: python -m tests.cluster.reaper reap [--all]   (--all also removes runs whose owner still runs)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
