"""Fault → every process gone for a *user script* beside the built-in workload (3 namespace nodes, gloo on CPU).

The user script is ``tests/launch/userscripts/ddp_loop.py`` (a plain DDP loop, run with
``workload = "command"``); the built-in one is the all-reduce check. Both are supervised by ftwiz on the
same cluster, interleaved, for the same faults: SIGKILL of rank 1, SIGSTOP of rank 1 (a stall; the
stall timeout subtracted), and, for the script only, an exception raised on rank 2 (timed from the
moment its traceback line reached the controller). The issue's target: within 10 s, as for the built-in.

Run: ``python -m bench usercode`` (``--quick``: one repetition).
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.launch_bench import _kill_all, _pids, _rank_pid, _wait, cluster_network_env  # noqa: E402

STALL_TIMEOUT_S = 10.0
SCRIPTS = ROOT / "tests" / "launch" / "userscripts"


def run(args: Any) -> list[dict]:
    """The rows (see the module docstring)."""
    from tests.cluster import cluster_support_problem

    problem = cluster_support_problem(need_sshd=True, need_agent=True)
    if problem:
        print(f"usercode bench skipped: {problem}", file=sys.stderr)
        return []
    reps = 1 if getattr(args, "quick", False) else 3
    return fault_rows(reps=reps)


def _config(cluster, workload: str, fault: str):
    job: dict[str, Any] = {"stall_timeout_s": STALL_TIMEOUT_S, "first_step_grace_s": 120}
    if workload == "builtin":
        job.update(workload="allreduce", sizes_mb=[0.25] * 4000, iterations=20, warmup_iterations=0)
    else:
        extra = ["--fail-rank", "2", "--fail-step", "8"] if fault == "raise" else []
        job.update(workload="command", command=["ddp_loop.py", "--steps", "100000", "--sleep", "0.1", *extra], code_dir=str(SCRIPTS),
                   progress_regex=r"step (?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[0-9.]+)")
    config = cluster.config(**job)
    for node in config.nodes:
        node.gpus = 1
    return config


def _once(cluster, workload: str, fault: str, *, network_env, runs_dir: Path) -> Optional[float]:
    """One injection; seconds from the fault to every process of the run gone (None: not within 60 s)."""
    from tui.launch.events import LogLine
    from tui.launch.run import Run, RunOptions

    config = _config(cluster, workload, fault)
    run = Run(config, options=RunOptions(runs_dir=runs_dir, reap_for_s=60), network_env=network_env)
    raised_at: list[float] = []

    def observe(event: Any) -> None:
        if isinstance(event, LogLine) and "simulated data error" in event.text and not raised_at:
            raised_at.append(time.monotonic())

    run.subscribe(observe)
    def main() -> None:
        run.launch()
        run.supervise()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        if fault == "raise":
            if _wait(lambda: raised_at, 180) is None:
                return None
            if _wait(lambda: not _pids(run.run_id), 60) is None:
                return None
            return time.monotonic() - raised_at[0]
        moving = (lambda: len(run.progress.last_moved) >= 3) if workload == "builtin" else (lambda: (run.progress.snapshot.step or 0) >= 3)
        if _wait(moving, 180) is None:
            return None
        victim = _rank_pid(run.run_id, 1)
        if victim is None:
            return None
        os.kill(victim, signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
        gone = _wait(lambda: not _pids(run.run_id), 60)
        if gone is None and fault == "sigstop":
            os.kill(victim, signal.SIGCONT)
        return None if gone is None else gone - (STALL_TIMEOUT_S if fault == "sigstop" else 0.0)
    finally:
        if _pids(run.run_id):
            run.request_stop("bench cleanup")
            thread.join(60)
            _kill_all(run.run_id)
        thread.join(60)


def fault_rows(*, reps: int) -> list[dict]:
    """Rows: the user script's fault-to-gone beside the built-in workload's."""
    from tests.cluster import Cluster

    runs_dir = Path(f"/tmp/ftwiz-bench-usercode-{os.getpid()}")
    rows: list[dict] = []
    with Cluster.create(3) as cluster:
        network_env = cluster_network_env(cluster)
        for fault in ("sigkill", "sigstop", "raise"):
            times: dict[str, list[Optional[float]]] = {"user": [], "builtin": []}
            for _ in range(reps):
                for workload in ("user", "builtin") if fault != "raise" else ("user",):
                    cluster.heal()
                    times[workload].append(_once(cluster, workload, fault, network_env=network_env, runs_dir=runs_dir))
                    print(f"   {fault} {workload}: {times[workload][-1]}", file=sys.stderr, flush=True)
            rows.append(_row(fault, times))
    return rows


def _median(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known and len(known) == len(values) else None


def _row(fault: str, times: dict[str, list[Optional[float]]]) -> dict:
    label = {"sigkill": "SIGKILL of rank 1", "sigstop": f"SIGSTOP of rank 1 (stall timeout {STALL_TIMEOUT_S:g} s subtracted)",
             "raise": "exception on rank 2 (from its traceback reaching ftwiz)"}[fault]
    value, base = _median(times["user"]), _median(times["builtin"])
    ratio = round(value / base, 3) if value is not None and base else None
    return {"measure": f"user script: fault → every process gone: {label}", "value": value, "unit": "s",
            "baseline": base if fault != "raise" else None, "ratio": ratio, "target": "<= 10 (built-in workload beside it)",
            "runs": [None if v is None else round(v, 3) for v in times["user"]],
            "baseline_runs": [None if v is None else round(v, 3) for v in times["builtin"]]}


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(json.dumps(run(parser.parse_args()), indent=2))
