"""``balance = "auto"`` against ``"off"`` on namespace nodes (real sshd, real torchrun, gloo on CPU).

A 2-node cluster, one rank per node, a LoRA fine-tune with the same global batch:

1. skewed: node1's sshd (and so every process its sessions start: its torchrun and rank) in a cgroup held to a
   fraction of a core; ``off`` vs ``auto`` tokens/s, the final loss of each, and each node's solo throughput (a
   one-node run of the same per-rank batch) — targets: auto ≥ 1.25× off, auto ≥ 90 % of the solo sum, final
   loss within 3 %;
2. even: no cgroup; auto's cost against off (target ≤ 3 %).

The model is the tiny Llama at hidden size 256 and 4 layers (~4 M parameters): a step of the default 0.1 M
model takes ~20 ms, most of it the loop's own overhead, so its throughput measures the Python around the
arithmetic rather than the nodes' speed; this one's step is ~10x that, compute-bound like a real fine-tune.
A run's tokens/s is all tokens after its first progress line over the time since (a median of two-step
windows of a shared machine is noise). ``FTWIZ_BENCH_REPS`` reps of off, auto and each node solo alternate so
a load that comes and goes hits them all; each figure is the median of its runs, the auto-to-solo-sum ratio is
also given per rep (a busy host's other work takes from node0, the unheld one, and changed its speed by 2x
between runs), and the rows say the load average.
Each ``auto`` run also gets a row of what decides its figure, so an outlier can be told apart: the speeds its
calibration measured, its shares, each rank's median ``compute_s`` and ``sync_s`` per step (after step 2, from
the heartbeats) and the 1-minute load average when it ended. Shares and calibration alike with every rank's
compute slower points at the host, not the balancer.
Run: ``python -m bench balance`` (``--quick``: one rep, fewer steps).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SLOW_CORES = 0.25
HIDDEN, LAYERS = 256, 4
REPS = 3


def run(args: Any) -> list[dict]:
    """The balance rows (see the module docstring)."""
    from tests.cluster import cluster_support_problem
    from tests.cluster.harness import Cluster
    from tests.doctor.cgroup import CpuCgroup, cpu_cgroup_problem

    problem = cluster_support_problem(need_sshd=True, need_agent=False) or cpu_cgroup_problem()
    if problem:
        print(f"balance bench skipped: {problem}", file=sys.stderr)
        return []
    quick = getattr(args, "quick", False)
    steps, reps = (16, 1) if quick else (30, int(os.environ.get("FTWIZ_BENCH_REPS", REPS)))
    base = Path(tempfile.mkdtemp(prefix="ftwiz-balance-bench-"))
    assets = _assets(base)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {}

    def launch(key: str, balance: str, only: Optional[str] = None) -> None:
        runs.setdefault(key, []).append(_launch(cluster, base, assets, steps, balance, only=only))

    with Cluster.create(2) as cluster:
        slow = cluster.nodes[1]
        with CpuCgroup(SLOW_CORES) as group:
            group.add(sshd_pid(slow))
            for _ in range(reps):  # each rep its own solo runs: node0's share of a busy host changes by 2x between runs
                launch("off", "off")
                launch("auto", "auto")
                for node in cluster.nodes:
                    launch(f"solo {node.name}", "off", only=node.name)
        for _ in range(reps):
            launch("even off", "off")
            launch("even auto", "auto")
    load_after = os.getloadavg()
    rate = {key: _median([r["tokens_per_s"] for r in results]) for key, results in runs.items()}
    solo_sum = sum(rate[f"solo {node.name}"] or 0.0 for node in cluster.nodes)
    rows = [
        _row(f"skewed: balanced vs uniform tokens/s (node1 at {SLOW_CORES:.2f} core)", rate["auto"], rate["off"], ">= 1.25"),
        _row("skewed: balanced vs the sum of solo tokens/s", rate["auto"], solo_sum, ">= 0.9"),
    ]
    paired = [auto["tokens_per_s"] / sum(runs[f"solo {node.name}"][rep]["tokens_per_s"] or 0.0 for node in cluster.nodes)
              for rep, auto in enumerate(runs["auto"]) if auto["tokens_per_s"]]
    rows.append({"measure": "skewed: balanced vs the solo sum of the same rep (median of reps; each rep)", "unit": "",
                 "value": json.dumps([_median(paired), [round(x, 3) for x in paired]]), "target": ">= 0.9"})
    rows += [_row(f"skewed: {node.name} solo tokens/s", rate[f"solo {node.name}"], None, "") for node in cluster.nodes]
    loss = {key: _median([r["loss"] for r in runs[key]]) for key in ("off", "auto")}
    rows.append(_row("skewed: final loss auto vs off", loss["auto"], loss["off"], "0.97 .. 1.03", unit="loss"))
    rows.append(_row("even: balanced vs uniform tokens/s", rate["even auto"], rate["even off"], ">= 0.97"))
    for key, results in runs.items():
        rows.append({"measure": f"runs: {key} tokens/s", "value": json.dumps([r["tokens_per_s"] for r in results]), "unit": "tok/s"})
    rows.append({"measure": "balance shares (skewed, auto)", "value": json.dumps([r["shares"] for r in runs["auto"]]), "unit": "samples/step"})
    for index, result in enumerate(runs["auto"]):
        rows.append({"measure": f"skewed auto run {index + 1}: calibrated, shares, compute_s, sync_s, load", "unit": "",
                     "value": json.dumps({k: result[k] for k in ("tokens_per_s", "calibrated", "shares", "compute_s", "sync_s", "load")})})
    rows.append({"measure": "load average before / after (1, 5, 15 min)",
                 "value": " / ".join(",".join(f"{x:.1f}" for x in load) for load in (load_before, load_after)), "unit": ""})
    return rows


def _median(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


def _row(measure: str, value: Optional[float], baseline: Optional[float], target: str, *, unit: str = "tok/s") -> dict:
    ratio = value / baseline if value and baseline else None
    return {"measure": measure, "value": value, "unit": unit, "baseline": baseline, "ratio": round(ratio, 3) if ratio else None,
            "target": target}


def _assets(base: Path) -> dict[str, Path]:
    model, data = base / "model", base / "train.jsonl"
    base.chmod(0o755)
    for argv in (["-m", "agent.workloads.tiny", "model", str(model), "--hidden-size", str(HIDDEN), "--layers", str(LAYERS)],
                 ["-m", "agent.workloads", "--make-tiny-dataset", str(data), "--records", "400"]):
        subprocess.run([sys.executable, *argv], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return {"model": model, "dataset": data}


def sshd_pid(node: Any) -> int:
    process = getattr(node, "_sshd", None)
    if process is None:
        raise RuntimeError(f"{node.name}: no sshd started by the harness")
    return int(process.pid)


def _launch(cluster: Any, base: Path, assets: dict[str, Path], steps: int, balance: str, *, only: Optional[str] = None) -> dict[str, Any]:
    """One run; ``only`` = one node (its solo throughput at the same per-rank batch)."""
    from tui.launch import commands
    from tui.runs.record import latest_run_id

    runs = base / "runs"
    os.environ["FTWIZ_RUNS_DIR"] = str(runs)
    # one thread per rank: the namespace nodes share this host's cores, and each reports all of them (two ranks
    # of two spinning OpenMP threads on two cores ran 10x slower than one rank alone)
    config = cluster.config(workload="sft", method="lora", model=str(assets["model"]), dataset=str(assets["dataset"]), seq_len=64,
                            micro_batch_size=4, grad_accum_steps=2, max_steps=steps, save_steps=100000, logging_steps=2,
                            learning_rate=1e-3, precision="fp32", optimizer="adamw", gradient_checkpointing=False, lora_r=4,
                            lora_alpha=8, output_dir=f"checkpoints/bench-{balance}", stall_timeout_s=600, first_step_grace_s=600,
                            balance=balance, sharding="ddp", nccl={"env": {"OMP_NUM_THREADS": "1"}})
    if only is not None:
        config.nodes = [n for n in config.nodes if n.name == only]
        config.cluster.master = only
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    code = commands.launch(config, yes=True, detach=False, resume=False, force=True, checklist=False, printer=quiet)
    run_dir = runs / (latest_run_id(runs) or "")
    record = json.loads((run_dir / "run.json").read_text())
    if code != 0:
        raise RuntimeError(f"{balance} run failed: {record.get('reason')}")
    progress = _progress(run_dir)
    compute, sync = _rank_timings(run_dir)
    return {"tokens_per_s": run_rate(progress), "loss": progress[-1]["loss"] if progress else None,
            "shares": [r["samples_per_step"] for r in (record.get("balance") or {}).get("ranks", [])],
            "calibrated": _calibrated(run_dir), "compute_s": compute, "sync_s": sync, "load": round(os.getloadavg()[0], 2)}


def run_rate(progress: list[dict]) -> Optional[float]:
    """Tokens/s of a run from its progress lines: every window's tokens after the first line over the time since.

    A line's ``tokens_per_s`` is its window's tokens over the time since the line before, so the window's
    tokens are that rate times the gap between the two lines' times.
    """
    timed = [p for p in progress if p.get("time") is not None]
    tokens = sum((p.get("tokens_per_s") or 0.0) * (p["time"] - q["time"]) for q, p in itertools.pairwise(timed))
    span = timed[-1]["time"] - timed[0]["time"] if len(timed) > 1 else 0.0
    return round(tokens / span, 1) if span > 0 else None


def _records(run_dir: Path, kind: str) -> list[dict]:
    prefix = '{"ftwiz":"%s"' % kind
    return [json.loads(text) for log in sorted(run_dir.glob("*.log")) for line in log.read_text().splitlines()
            if (text := line.partition(" | ")[2]).startswith(prefix)]


def _rank_timings(run_dir: Path) -> tuple[list[Optional[float]], list[Optional[float]]]:
    """Each rank's median ``compute_s`` and ``sync_s`` per step after step 2 (the heartbeats), rank order."""
    beats = [b for b in _records(run_dir, "heartbeat") if "compute_s" in b and (b.get("step") or 0) > 2]
    ranks = sorted({int(b["rank"]) for b in beats})
    return ([_median([b["compute_s"] for b in beats if b["rank"] == r]) for r in ranks],
            [_median([b.get("sync_s") for b in beats if b["rank"] == r]) for r in ranks])


def _calibrated(run_dir: Path) -> Optional[list[float]]:
    """The samples/s per rank of the run's first balance note (the calibration), from its message."""
    notes = [n["message"] for n in _records(run_dir, "note") if "balance" in n and "calibrated" in n.get("message", "")]
    return [float(x) for x in re.findall(r"([\d.]+) samples/s", notes[0])] if notes else None


def _progress(run_dir: Path) -> list[dict]:
    rows = []
    for log in sorted(run_dir.glob("*.log")):
        for line in log.read_text().splitlines():
            text = line.partition(" | ")[2]
            if text.startswith('{"ftwiz":"progress"'):
                rows.append(json.loads(text))
    return sorted(rows, key=lambda r: r["step"])
