"""Fixtures for the launcher tests: a run in a background thread, process scans, tiny model/data.

"Every process of the run is gone" is checked by scanning ``/proc`` for environments carrying
``FTWIZ_RUN_ID=<run id>``: the namespace nodes share this machine's PID space, so one scan sees
every node.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from tui.launch.events import Event, LogLine, ProgressChanged, RunNote
from tui.launch.run import Run, RunOptions

REPO = Path(__file__).resolve().parents[2]


def run_pids(run_id: str, node: Optional[str] = None) -> list[int]:
    """Pids whose environment carries ``FTWIZ_RUN_ID=run_id`` (and ``FTWIZ_NODE=node`` when given)."""
    want = f"FTWIZ_RUN_ID={run_id}".encode()
    want_node = f"FTWIZ_NODE={node}".encode() if node else None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or want not in env:
            continue
        if want_node is not None and want_node not in env:
            continue
        found.append(int(entry))
    return found


def rank_pids(run_id: str, rank: int) -> list[int]:
    """The pids of the run's processes with ``RANK=rank``: the worker and any process it started."""
    want = f"RANK={rank}".encode()
    found = []
    for pid in run_pids(run_id):
        try:
            if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            continue
    return found


def rank_pid(run_id: str, rank: int) -> Optional[int]:
    """The pid of the worker with ``RANK=rank`` in the run (the first of :func:`rank_pids`)."""
    pids = rank_pids(run_id, rank)
    return pids[0] if pids else None


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` s pass (None)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


class RunThread:
    """A :class:`Run` launched and supervised in a thread, with every event kept."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.events: list[Event] = []
        self.result = None
        self.error: Optional[BaseException] = None
        self.finished_at: Optional[float] = None
        self._lock = threading.Lock()
        run.subscribe(self._record)
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _record(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def _main(self) -> None:
        try:
            self.run.launch()
            self.result = self.run.supervise()
        except BaseException as exc:  # surfaced by join()
            self.error = exc
        self.finished_at = time.monotonic()

    def start(self) -> "RunThread":
        self.thread.start()
        return self

    def join(self, timeout: float):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the run did not finish within {timeout} s; notes: {self.notes()}"
        if self.error is not None:
            raise self.error
        return self.result

    def lines(self, rank: Optional[int] = None) -> list[LogLine]:
        with self._lock:
            return [e for e in self.events if isinstance(e, LogLine) and (rank is None or e.rank == rank)]

    def notes(self) -> list[str]:
        with self._lock:
            return [e.text for e in self.events if isinstance(e, RunNote)]

    def progress(self):
        with self._lock:
            snaps = [e.progress for e in self.events if isinstance(e, ProgressChanged)]
        return snaps[-1] if snaps else None

    def wait_ranks(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` ranks said ``started`` and each has a heartbeat."""
        return bool(wait_until(lambda: len(self.run.progress.last_moved) >= count or self.finished_at, timeout)) and not self.finished_at


def network_env(config) -> dict[str, dict[str, str]]:
    """The interface plan from the nodes' agents, as ``ftwiz --launch`` computes it."""
    from shared.netplan import node_env
    from tui.client import AgentClient

    async def poll():
        async with AgentClient(config) as client:
            return await client.poll()

    statuses = asyncio.run(poll())
    reports = {name: s.report for name, s in statuses.items() if s.report is not None}
    assert len(reports) == len(config.nodes), f"agents down: {[n for n in statuses if n not in reports]}"
    return node_env(config, reports)


def make_run(config, tmp_path: Path, **kw: Any) -> Run:
    """A Run of ``config`` with its records under ``tmp_path/runs`` and the agents' network plan."""
    options = kw.pop("options", None) or RunOptions()
    options.runs_dir = tmp_path / "runs"
    return Run(config, options=options, network_env=kw.pop("network_env", None) or network_env(config), **kw)


LONG_ALLREDUCE: dict[str, Any] = {"workload": "allreduce", "sizes_mb": [0.25] * 2000, "iterations": 2, "warmup_iterations": 0,
                                  "pause_s": 0.2}
"""An all-reduce that runs for minutes unless stopped: 2000 sizes, each a heartbeat, a fifth of a second apart
(``pause_s``: the ranks sleep between sizes, so a run that only has to be there leaves the cores to the test)."""


def long_allreduce(cluster, gpus=(2, 1, 1), **job: Any):
    """A config running :data:`LONG_ALLREDUCE` (with ``job``'s changes) on ``gpus`` processes per node."""
    job = {**LONG_ALLREDUCE, **job}
    config = cluster.config(**job)
    for node, count in zip(config.nodes, gpus):
        node.gpus = count
    return config
