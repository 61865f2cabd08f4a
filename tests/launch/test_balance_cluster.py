"""``balance = "auto"`` against ``"off"`` on a skewed namespace cluster (real sshd, real torchrun, gloo on CPU).

Two nodes, one rank each; node1's sshd (and so its torchrun and rank) in a cgroup held to a quarter of a core.
The same job (global batch 16) runs with ``off`` then ``auto``; each run's tokens/s is what its own progress
lines measured (all tokens after the first line over the time since). ``auto`` must be at least 1.15x faster
(the bench's target is 1.25x on a quiet machine: two busy cores shared with other suites narrow the gap
between the nodes, never close it, since node1 is held below any share the load leaves node0) and its final
loss within 3 % of ``off``'s (the same samples per step, the same mathematics).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.balance_bench import HIDDEN, LAYERS, SLOW_CORES, run_rate, sshd_pid
from tests.doctor.cgroup import CpuCgroup, cpu_cgroup_problem
from tui.launch import commands
from tui.runs.record import latest_run_id

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STEPS = 20


@pytest.fixture(scope="module")
def model_256(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Llama at hidden 256 and 4 layers (compute-bound: see bench/balance_bench.py) and 300 records."""
    base = tmp_path_factory.mktemp("balance")
    base.chmod(0o755)
    model, data = base / "model", base / "train.jsonl"
    for argv in (["-m", "agent.workloads.tiny", "model", str(model), "--hidden-size", str(HIDDEN), "--layers", str(LAYERS)],
                 ["-m", "agent.workloads", "--make-tiny-dataset", str(data), "--records", "300"]):
        done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    return {"model": model, "dataset": data}


def _run(cluster, assets: dict[str, Path], runs: Path, balance: str) -> dict:
    config = cluster.config(workload="sft", method="lora", model=str(assets["model"]), dataset=str(assets["dataset"]), seq_len=64,
                            micro_batch_size=4, grad_accum_steps=2, max_steps=STEPS, save_steps=100000, logging_steps=2,
                            learning_rate=1e-3, precision="fp32", optimizer="adamw", gradient_checkpointing=False, lora_r=4,
                            lora_alpha=8, output_dir=f"checkpoints/balance-{balance}", stall_timeout_s=600, first_step_grace_s=600,
                            balance=balance, sharding="ddp", nccl={"env": {"OMP_NUM_THREADS": "1"}})
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    code = commands.launch(config, yes=True, detach=False, resume=False, force=True, checklist=False, printer=quiet)
    run_dir = runs / (latest_run_id(runs) or "")
    record = json.loads((run_dir / "run.json").read_text())
    assert code == 0, (balance, record.get("reason"), record.get("failed"))
    progress = sorted((json.loads(text) for log in run_dir.glob("*.log") for line in log.read_text().splitlines()
                       if (text := line.partition(" | ")[2]).startswith('{"ftwiz":"progress"')), key=lambda p: p["step"])
    assert progress and progress[-1]["step"] == STEPS, (balance, progress[-3:])
    return {"tokens_per_s": run_rate(progress), "loss": progress[-1]["loss"], "record": record}


def test_auto_beats_off_on_a_node_held_to_a_quarter_core(make_cluster, model_256, tmp_path, monkeypatch):
    problem = cpu_cgroup_problem()
    if problem is not None:
        pytest.skip(problem)
    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    cluster = make_cluster(2)
    with CpuCgroup(SLOW_CORES) as slow:
        slow.add(sshd_pid(cluster.nodes[1]))
        off = _run(cluster, model_256, runs, "off")
        auto = _run(cluster, model_256, runs, "auto")
    shares = {r["node"]: r["samples_per_step"] for r in auto["record"]["balance"]["ranks"]}
    assert sum(shares.values()) == 16 and shares["node0"] > shares["node1"], shares
    assert auto["tokens_per_s"] >= 1.15 * off["tokens_per_s"], (auto["tokens_per_s"], off["tokens_per_s"], shares)
    assert abs(auto["loss"] - off["loss"]) <= 0.03 * off["loss"], (auto["loss"], off["loss"])
    assert auto["record"]["throughput"]["steps"] == STEPS - 1
