"""Fault → every process gone on the Slurm backend, beside the SSH backend's figure from the same run.

A real Slurm (slurmctld, one slurmd per namespace node, munged: ``tests/cluster/slurm.py``) runs
``ftwiz --launch --yes`` of a long all-reduce on 3 nodes; each repetition injects one fault once every rank
runs and times (a) the fault to every process of the run gone and (b) the fault to ftwiz's exit (stopped,
with Slurm's reason). Faults: SIGKILL of rank 1 (the supervisor's stop-all through job steps), ``scancel`` of
the run's keeper step (Slurm kills the run; ftwiz hears it from the job's state), and node1 set DOWN
(Slurm ends the job: NODE_FAIL). The baseline is the SSH backend's SIGKILL figure, measured in this run on
3 namespace nodes over real sshd (``bench.launch_bench.fault_rows``).

Run: ``python -m bench slurm`` (``--quick``: one repetition).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.launch_bench import _pids, _rank_pid, _wait  # noqa: E402

FAULTS = ("sigkill", "scancel_step", "node_down")
LABEL = {"sigkill": "SIGKILL of one rank", "scancel_step": "scancel of the run's job step",
         "node_down": "node1 set DOWN (NODE_FAIL)"}


def run(args: Any) -> list[dict]:
    """The rows (see the module docstring)."""
    from tests.cluster import cluster_support_problem
    from tests.cluster.slurm import slurm_support_problem

    problem = slurm_support_problem() or cluster_support_problem(need_sshd=True, need_agent=True)
    if problem:
        print(f"slurm bench skipped: {problem}", file=sys.stderr)
        return []
    reps = 1 if getattr(args, "quick", False) else 3
    from bench.launch_bench import fault_rows

    ssh = fault_rows(reps=reps, cap=60.0, faults=("sigkill",))[0]
    return [*slurm_rows(reps=reps, ssh_sigkill=ssh.get("value")), dict(ssh, measure="SSH backend: " + ssh["measure"])]


def _config(slurm: Any, path: Path, port: int) -> Path:
    sizes = ", ".join(["0.25"] * 2000)
    path.write_text(
        f'[cluster]\nbackend = "slurm"\nrendezvous_port = {port}\n\n'
        f'[slurm]\npartition = "{slurm.partition}"\nnodes = 3\ntime = "00:10:00"\npython = "{sys.executable}"\n'
        f'workdir = "{slurm.shared_dir / "work"}"\n\n'
        f'[job]\nworkload = "allreduce"\nsizes_mb = [{sizes}]\niterations = 20\nwarmup_iterations = 0\n')
    return path


def _once(slurm: Any, fault: str, workdir: Path, port: int) -> dict[str, Optional[float]]:
    env = {**slurm.env(), "FTWIZ_RUNS_DIR": str(workdir / "runs")}
    config = _config(slurm, workdir / f"ftwiz-{port}.toml", port)
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "--config", str(config), "--launch", "--yes"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    out: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        if _wait(lambda: "".join(out).count("started: rank") == 3 or proc.poll() is not None, 300) is None or proc.poll() is not None:
            print("".join(err)[-2000:], file=sys.stderr)
            return {"gone": None, "exited": None}
        run_id = next(line.split("run ", 1)[1].split(":", 1)[0] for line in err if "about to launch run" in line)
        job = next(line.split("submitted job ", 1)[1].split()[0] for line in err if "submitted job" in line)
        start = time.monotonic()
        if fault == "sigkill":
            victim = _rank_pid(run_id, 1)
            if victim is None:
                return {"gone": None, "exited": None}
            os.kill(victim, signal.SIGKILL)
        elif fault == "scancel_step":
            slurm.run(["scancel", f"{job}.0"])
        else:
            slurm.run(["scontrol", "update", "nodename=node1", "state=down", "reason=bench"])
        gone = None if _wait(lambda: not _pids(run_id), 60) is None else time.monotonic() - start
        exited = None if _wait(lambda: proc.poll() is not None, 120) is None else time.monotonic() - start
        return {"gone": gone, "exited": exited}
    finally:
        if proc.poll() is None:
            proc.kill()
        slurm.cancel_all()
        if fault == "node_down":
            slurm.run(["scontrol", "update", "nodename=node1", "state=resume"], check=False)
            _wait(lambda: slurm.node_states().get("node1") == "idle", 60)


def slurm_rows(*, reps: int, ssh_sigkill: Optional[float]) -> list[dict]:
    """Fault-to-gone and fault-to-exit rows on a 3-node Slurm (median of ``reps``)."""
    from tests.cluster.slurm import SlurmCluster

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ftwiz-slurm-bench-") as tmp, SlurmCluster.create(3) as slurm:
        port = 29600
        for fault in FAULTS:
            results = []
            for _ in range(reps):
                port += 1
                results.append(_once(slurm, fault, Path(tmp), port))
                print(f"   slurm {fault}: {results[-1]}", file=sys.stderr, flush=True)
            gone = [r["gone"] for r in results]
            exited = [r["exited"] for r in results]
            value = statistics.median(gone) if all(v is not None for v in gone) else None
            baseline = ssh_sigkill if fault == "sigkill" else None
            rows.append({"measure": f"Slurm backend: fault → every process gone: {LABEL[fault]}",
                         "value": None if value is None else round(value, 3), "unit": "s",
                         "baseline": baseline, "ratio": round(value / baseline, 3) if value and baseline else None,
                         "target": "<= 10", "runs": [None if v is None else round(v, 3) for v in gone]})
            done = statistics.median(exited) if all(v is not None for v in exited) else None
            rows.append({"measure": f"Slurm backend: fault → ftwiz done, with the reason: {LABEL[fault]}",
                         "value": None if done is None else round(done, 3), "unit": "s", "target": "<= 10",
                         "runs": [None if v is None else round(v, 3) for v in exited]})
    return rows


if __name__ == "__main__":
    import json

    print(json.dumps(run(type("Args", (), {"quick": "--quick" in sys.argv})()), indent=2))
