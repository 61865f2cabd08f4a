"""Launcher benchmarks on network-namespace nodes (real sshd, real torchrun, gloo on CPU).

1. SSH fan-out: time from ``Run.launch()`` to torchrun started (pgid known) on every node, for 1, 4, 8
   and 16 nodes; target time(16)/time(1) ≤ 1.5. Every node is prepared (connect, mkdir, SFTP of the
   workloads package and job spec) and started in parallel; the run is stopped right after.
2. Fault → every process of the run gone, for SIGKILL of one rank, SIGSTOP of one rank (the stall
   timeout subtracted) and a cut link (node2's ``eth0`` down: the *other* nodes' processes), with ftwiz
   supervising, side by side with plain torchrun on the same faults: the same torchrun command lines
   started over SSH in their own sessions and then left alone (``Run.launch()`` then detach), which is
   what the seeds' "start torchrun by hand on every machine" does. The plain baseline is capped at
   ``--anchor-cap`` s (default 60) and reported as ``>cap`` when it did not end by itself.

Run: ``python -m bench launch`` (``--quick``: one repetition and 1/4 nodes for the fan-out).
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cpu import machine_busy_s, self_cpu_s  # noqa: E402

STALL_TIMEOUT_S = 10.0


def run(args: Any) -> list[dict]:
    """All launcher rows (see the module docstring)."""
    from tests.cluster import cluster_support_problem

    problem = cluster_support_problem(need_sshd=True, need_agent=False)
    if problem:
        print(f"launch bench skipped: {problem}", file=sys.stderr)
        return []
    quick = bool(getattr(args, "quick", False))
    reps = 1 if quick else 3
    cap = float(getattr(args, "anchor_cap", 60.0) or 60.0)
    rows = fanout_rows([1, 4] if quick else [1, 4, 8, 16], reps=reps)
    rows += fault_rows(reps=reps, cap=cap)
    return rows


# --------------------------------------------------------------------------- helpers


def _pids(run_id: str, node: Optional[str] = None) -> list[int]:
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
        if state != "Z" and want in env and (want_node is None or want_node in env):
            found.append(int(entry))
    return found


def _rank_pid(run_id: str, rank: int) -> Optional[int]:
    for pid in _pids(run_id):
        try:
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
        except OSError:
            continue
    return None


def _wait(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Optional[float]:
    """Seconds until ``predicate()`` holds, or None after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(interval)
    return None


def _kill_all(run_id: str) -> None:
    for pid in _pids(run_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# --------------------------------------------------------------------------- fan-out


def _torchrun_stand_in(directory: Path) -> Path:
    """A "python" for the fan-out nodes: the real interpreter for ftwiz's node helper, ``sleep`` for torchrun.

    Every namespace node shares this machine's 2 cores; 16 real torchruns would spend ~30 CPU-s
    importing torch right as the later nodes are being started, which measures the CPU, not the SSH
    fan-out. On a real cluster each node imports torch on its own CPUs.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python-stand-in"
    path.write_text(
        "#!/bin/sh\n"
        '# ftwiz bench: torchrun replaced by sleep; everything else runs on the real interpreter.\n'
        'if [ "$1" = "-m" ] && [ "$2" = "torch.distributed.run" ]; then exec sleep 300; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    directory.chmod(0o755)
    return path


def fanout_rows(sizes: list[int], *, reps: int) -> list[dict]:
    """Launch-to-all-started time per cluster size (median of ``reps``)."""
    from tests.cluster import Cluster
    from tui.launch.run import Run, RunOptions

    medians: dict[int, float] = {}
    rows = []
    workdir = Path(f"/tmp/ftwiz-bench-runs-{os.getpid()}")
    stand_in = _torchrun_stand_in(workdir)
    for n in sizes:
        times, cpu, machine = [], [], []
        with Cluster.create(n, agent=False, training_python=str(stand_in)) as cluster:
            for _ in range(reps):
                config = cluster.config(workload="allreduce", sizes_mb=[0.01], iterations=1, warmup_iterations=0)
                run_ = Run(config, options=RunOptions(runs_dir=workdir), network_env={})
                before, machine_before = self_cpu_s(), machine_busy_s()
                run_.launch()
                cpu.append(self_cpu_s() - before)
                machine.append(machine_busy_s() - machine_before)
                times.append(run_.record.data["fanout_s"])
                run_.request_stop("benchmark: fan-out measured")
                run_.supervise()
                _kill_all(run_.run_id)
                time.sleep(1.0)  # let the machine settle between repetitions
        medians[n] = statistics.median(times)
        rows.append({"measure": f"ssh fan-out, {n} node(s): launch → torchrun started everywhere", "value": round(medians[n], 3),
                     "unit": "s", "runs": [round(t, 3) for t in times],
                     "controller_cpu_s": round(statistics.median(cpu), 3),
                     "machine_cpu_s": round(statistics.median(machine), 3),
                     "machine_cpu_s_per_node": round(statistics.median(machine) / n, 3),
                     "cpu_floor_s": round(statistics.median(machine) / (os.cpu_count() or 1), 3)})
    if 1 in medians and max(medians) > 1:
        top = max(medians)
        ratio = medians[top] / medians[1]
        rows.append({"measure": f"ssh fan-out time({top})/time(1)", "value": round(ratio, 3), "unit": "x", "target": "<= 1.5",
                     "baseline": round(medians[1], 3), "ratio": round(ratio, 3),
                     "note": "every namespace node's sshd, login shell and node helper share this machine's cores; "
                             "controller_cpu_s in the per-size rows is the controller's own share, machine_cpu_s all "
                             "processes' (sshd, shells, helpers, controller), cpu_floor_s = machine_cpu_s / cores: "
                             "the least time that much work takes here however parallel the fan-out is"})
    return rows


# --------------------------------------------------------------------------- faults


class _Watched:
    """A Run launched in a thread, supervised (ftwiz) or detached right after start (plain torchrun)."""

    def __init__(self, config, runs_dir: Path, *, supervised: bool, network_env) -> None:
        from tui.launch.events import RunNote
        from tui.launch.run import Run, RunOptions

        self.run = Run(config, options=RunOptions(runs_dir=runs_dir, reap_for_s=90), network_env=network_env)
        self.supervised = supervised
        self.detected_at: Optional[float] = None
        self.result = None

        def observe(event: Any) -> None:
            if isinstance(event, RunNote) and event.text.startswith("stopping every node") and self.detected_at is None:
                self.detected_at = time.monotonic()

        self.run.subscribe(observe)
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        self.run.launch()
        if not self.supervised:
            self.run.detach()
        self.result = self.run.supervise()

    def start(self, ranks: int, timeout: float = 150) -> bool:
        self.thread.start()
        if self.supervised:
            return _wait(lambda: len(self.run.progress.last_moved) >= ranks, timeout) is not None
        # Unsupervised: wait for the workers' heartbeats in the node-side logs.
        def beating() -> bool:
            return all(_heartbeats(Path(n.get("node_log") or "/nonexistent")) >= 2 for n in self.run.record.data.get("nodes", {}).values())

        return _wait(beating, timeout, 0.2) is not None


def _heartbeats(path: Path) -> int:
    try:
        return path.read_text(errors="replace").count('"heartbeat"')
    except OSError:
        return 0


def _fault_once(cluster, fault: str, *, supervised: bool, cap: float, network_env, runs_dir: Path) -> dict:
    """One fault injection; returns timings in seconds (None = did not happen within the cap)."""
    from tui.launch.run import Run, RunOptions

    job = {"workload": "allreduce", "sizes_mb": [0.25] * 4000, "iterations": 20, "warmup_iterations": 0,
           "stall_timeout_s": STALL_TIMEOUT_S, "first_step_grace_s": 120}
    if fault == "sigstop0":
        del job["first_step_grace_s"]  # the default grace (30 min): the hang must be found without it
    config = cluster.config(**job)
    watched = _Watched(config, runs_dir, supervised=supervised, network_env=network_env)
    run_id = watched.run.run_id
    out: dict[str, Any] = {"fault": fault, "supervised": supervised}
    node2 = cluster.node("node2")
    try:
        if fault == "sigstop0":
            # Before the first step: stop rank 1 as soon as its process exists (it is still importing torch).
            watched.thread.start()
            victim = None
            if _wait(lambda: _rank_pid(run_id, 1), 150, 0.01) is not None:
                victim = _rank_pid(run_id, 1)
            if victim is None:
                out["error"] = "rank 1 never started"
                return out
            os.kill(victim, signal.SIGSTOP)
            fault_at = time.monotonic()
            gone = _wait(lambda: not _pids(run_id), cap)
            if gone is None:
                os.kill(victim, signal.SIGCONT)
        elif not watched.start(3):
            out["error"] = "the run did not start"
            return out
        else:
            time.sleep(1.0)
            fault_at = time.monotonic()
        if fault == "sigstop0":
            pass
        elif fault == "sigkill":
            os.kill(_rank_pid(run_id, 1), signal.SIGKILL)
            gone = _wait(lambda: not _pids(run_id), cap)
        elif fault == "sigstop":
            victim = _rank_pid(run_id, 1)
            os.kill(victim, signal.SIGSTOP)
            gone = _wait(lambda: not _pids(run_id), cap)
            if gone is None:
                os.kill(victim, signal.SIGCONT)
        else:
            node2.link_down()
            gone = _wait(lambda: not _pids(run_id, "node0") and not _pids(run_id, "node1"), cap)
        out["fault_to_gone_s"] = gone
        if watched.detected_at is not None:
            out["detect_s"] = watched.detected_at - fault_at
            if gone is not None:
                out["detect_to_gone_s"] = fault_at + gone - watched.detected_at
        if fault == "link" and supervised and gone is not None:
            node2.link_up()
            up_at = time.monotonic()
            reaped = _wait(lambda: not _pids(run_id), 60)
            out["link_up_to_reaped_s"] = reaped
            out["reaped_seconds_after_up"] = reaped if reaped is None else round(time.monotonic() - up_at, 3)
    finally:
        if fault == "link":
            node2.link_up()
        if not supervised or _pids(run_id):
            for pid in _pids(run_id):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            Run.stop_detached(config, run_id, options=RunOptions(runs_dir=runs_dir))
            _kill_all(run_id)
        watched.thread.join(120)
    return out


def cluster_network_env(cluster: Any) -> dict[str, dict[str, str]]:
    """The interface plan of a namespace cluster, from its agents' reports (as a launch after the checklist gets it)."""
    import asyncio

    from shared.netplan import node_env
    from tui.client import AgentClient

    config = cluster.config()

    async def poll():
        async with AgentClient(config) as client:
            return await client.poll()

    reports = {n: s.report for n, s in asyncio.run(poll()).items() if s.report is not None}
    return node_env(config, reports)


def fault_rows(*, reps: int, cap: float, faults: tuple[str, ...] = ("sigkill", "sigstop", "sigstop0", "link")) -> list[dict]:
    """Fault-to-gone rows, ftwiz against plain torchrun."""

    from tests.cluster import Cluster

    runs_dir = Path(f"/tmp/ftwiz-bench-runs-{os.getpid()}")
    rows: list[dict] = []
    with Cluster.create(3) as cluster:
        network_env = cluster_network_env(cluster)
        for fault in faults:
            results = {True: [], False: []}
            for supervised in (True, False):
                for _ in range(reps):
                    cluster.heal()
                    results[supervised].append(_fault_once(cluster, fault, supervised=supervised, cap=cap, network_env=network_env, runs_dir=runs_dir))
                    print(f"   {fault} {'ftwiz' if supervised else 'plain'}: {results[supervised][-1]}", file=sys.stderr, flush=True)
            rows += _fault_summary(fault, results, cap)
    return rows


def _median(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) and known else None


def _fault_summary(fault: str, results: dict, cap: float) -> list[dict]:
    label = {"sigkill": "SIGKILL of one rank", "sigstop": f"SIGSTOP of one rank (stall timeout {STALL_TIMEOUT_S:g} s subtracted)",
             "sigstop0": f"SIGSTOP of one rank before the first step, default 30 min grace (stall timeout {STALL_TIMEOUT_S:g} s subtracted)",
             "link": "node2 link cut (other nodes' processes)"}[fault]
    ours = [r.get("fault_to_gone_s") for r in results[True]]
    plain = [r.get("fault_to_gone_s") for r in results[False]]
    stall = fault in ("sigstop", "sigstop0")
    if stall:
        ours = [None if v is None else v - STALL_TIMEOUT_S for v in ours]
        plain = [None if v is None else v - STALL_TIMEOUT_S for v in plain]
    value = _median(ours)
    base = _median(plain)
    base_text: Any = round(base, 3) if base is not None else f">{cap - (STALL_TIMEOUT_S if stall else 0):g}"
    ratio: Any = None
    if value is not None and base is not None and base > 0:
        ratio = round(value / base, 3)
    elif value is not None:
        ratio = f"<{value / (cap - (STALL_TIMEOUT_S if stall else 0)):.3f}"
    rows = [{"measure": f"fault → every process gone: {label}", "value": None if value is None else round(value, 3), "unit": "s",
             "baseline": base_text, "ratio": ratio, "target": "<= 10 after detection; anchor plain torchrun >= 150 for SIGSTOP/link",
             "runs": [None if v is None else round(v, 3) for v in ours], "baseline_runs": [None if v is None else round(v, 3) for v in plain]}]
    after = _median([r.get("detect_to_gone_s") for r in results[True]])
    detect = _median([r.get("detect_s") for r in results[True]])
    short = {"sigkill": "SIGKILL of one rank", "sigstop": "SIGSTOP of one rank (stall)", "sigstop0": "SIGSTOP before step 1 (hang)",
             "link": "node2 link cut"}[fault]
    rows.append({"measure": f"detection → every process gone (ftwiz): {short}", "value": None if after is None else round(after, 3),
                 "unit": "s", "target": "<= 10", "detect_s": None if detect is None else round(detect, 3)})
    if fault == "link":
        reaped = _median([r.get("reaped_seconds_after_up") for r in results[True]])
        rows.append({"measure": "link back → node2's leftovers reaped (ftwiz)", "value": None if reaped is None else round(reaped, 3), "unit": "s"})
    return rows


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--anchor-cap", type=float, default=60.0)
    parser.add_argument("--only", choices=["fanout", "faults"])
    parser.add_argument("--faults", default="sigkill,sigstop,sigstop0,link", help="comma-separated subset of sigkill,sigstop,sigstop0,link")
    ns = parser.parse_args()
    if ns.only == "fanout":
        out = fanout_rows([1, 4] if ns.quick else [1, 4, 8, 16], reps=1 if ns.quick else 3)
    elif ns.only == "faults":
        out = fault_rows(reps=1 if ns.quick else 3, cap=ns.anchor_cap, faults=tuple(ns.faults.split(",")))
    else:
        out = run(ns)
    print(json.dumps(out, indent=2))
