"""``balance = "auto"`` against ``"off"`` on namespace nodes (real sshd, real torchrun, gloo on CPU).

A 2-node cluster, one rank per node, a LoRA fine-tune of the tiny model with the same global batch:

1. skewed: node1's sshd (and so every process its sessions start: its torchrun and rank) in a cgroup held to a
   fraction of a core; ``off`` vs ``auto`` tokens/s (the median of the progress lines after the first), the
   final loss of each, and each node's solo throughput (a one-node run of the same per-rank batch) — targets:
   auto ≥ 1.25× off, auto ≥ 90 % of the solo sum, final loss within 3 %;
2. even: no cgroup; auto's cost against off (target ≤ 3 %).

Throughputs on a shared machine are noisy: each ratio is between runs of the same invocation.
Run: ``python -m bench balance`` (``--quick``: fewer steps).
"""

from __future__ import annotations

import io
import json
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


def run(args: Any) -> list[dict]:
    """The balance rows (see the module docstring)."""
    from tests.cluster import cluster_support_problem
    from tests.cluster.harness import Cluster
    from tests.doctor.cgroup import CpuCgroup, cpu_cgroup_problem

    problem = cluster_support_problem(need_sshd=True, need_agent=False) or cpu_cgroup_problem()
    if problem:
        print(f"balance bench skipped: {problem}", file=sys.stderr)
        return []
    steps = 16 if getattr(args, "quick", False) else 40
    base = Path(tempfile.mkdtemp(prefix="ftwiz-balance-bench-"))
    assets = _assets(base)
    rows: list[dict] = []
    with Cluster.create(2) as cluster:
        slow = cluster.nodes[1]
        with CpuCgroup(SLOW_CORES) as group:
            group.add(_sshd_pid(slow))
            off = _launch(cluster, base, assets, steps, "off")
            auto = _launch(cluster, base, assets, steps, "auto")
            solo = [_launch(cluster, base, assets, steps, "off", only=node.name) for node in cluster.nodes]
        even_off = _launch(cluster, base, assets, steps, "off")
        even_auto = _launch(cluster, base, assets, steps, "auto")
    solo_sum = sum(r["tokens_per_s"] or 0.0 for r in solo)
    rows.append(_row("skewed: balanced tokens/s (node1 at %.2f core)" % SLOW_CORES, auto["tokens_per_s"], off["tokens_per_s"], ">= 1.25x uniform"))
    rows.append(_row("skewed: balanced vs the sum of solo tokens/s", auto["tokens_per_s"], solo_sum, ">= 0.9"))
    for node, result in zip(cluster.nodes, solo, strict=True):
        rows.append(_row(f"skewed: {node.name} solo tokens/s", result["tokens_per_s"], None, ""))
    rows.append(_row("skewed: final loss auto vs off", auto["loss"], off["loss"], "within 3 %"))
    rows.append(_row("even: balanced vs uniform tokens/s", even_auto["tokens_per_s"], even_off["tokens_per_s"], ">= 0.97"))
    rows.append({"measure": "balance shares (skewed, auto)", "value": json.dumps(auto["shares"]), "unit": "samples/step"})
    return rows


def _row(measure: str, value: Optional[float], baseline: Optional[float], target: str) -> dict:
    ratio = value / baseline if value and baseline else None
    return {"measure": measure, "value": value, "unit": "tok/s" if "loss" not in measure else "loss",
            "baseline": baseline, "ratio": round(ratio, 3) if ratio else None, "target": target}


def _assets(base: Path) -> dict[str, Path]:
    model, data = base / "model", base / "train.jsonl"
    base.chmod(0o755)
    for argv in (["--make-tiny-model", str(model)], ["--make-tiny-dataset", str(data), "--records", "400"]):
        subprocess.run([sys.executable, "-m", "agent.workloads", *argv], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return {"model": model, "dataset": data}


def _sshd_pid(node: Any) -> int:
    process = getattr(node, "_sshd", None)
    if process is None:
        raise RuntimeError(f"{node.name}: no sshd started by the harness")
    return int(process.pid)


def _launch(cluster: Any, base: Path, assets: dict[str, Path], steps: int, balance: str, *, only: Optional[str] = None) -> dict[str, Any]:
    """One run; ``only`` = one node (its solo throughput at the same per-rank batch)."""
    import os

    from tui.launch import commands
    from tui.runs.record import latest_run_id

    runs = base / "runs"
    os.environ["FTWIZ_RUNS_DIR"] = str(runs)
    config = cluster.config(workload="sft", method="lora", model=str(assets["model"]), dataset=str(assets["dataset"]), seq_len=64,
                            micro_batch_size=4, grad_accum_steps=2, max_steps=steps, save_steps=100000, logging_steps=2,
                            learning_rate=1e-3, precision="fp32", optimizer="adamw", gradient_checkpointing=False, lora_r=4,
                            lora_alpha=8, output_dir=f"checkpoints/bench-{balance}", stall_timeout_s=600, first_step_grace_s=600,
                            balance=balance, sharding="ddp")
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
    rates = [p["tokens_per_s"] for p in progress[1:] if p.get("tokens_per_s")]
    return {"tokens_per_s": round(statistics.median(rates), 1) if rates else None,
            "loss": progress[-1]["loss"] if progress else None,
            "shares": [r["samples_per_step"] for r in (record.get("balance") or {}).get("ranks", [])]}


def _progress(run_dir: Path) -> list[dict]:
    rows = []
    for log in sorted(run_dir.glob("*.log")):
        for line in log.read_text().splitlines():
            text = line.partition(" | ")[2]
            if text.startswith('{"ftwiz":"progress"'):
                rows.append(json.loads(text))
    return sorted(rows, key=lambda r: r["step"])
