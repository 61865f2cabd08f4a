"""A LoRA fine-tune of the tiny model across three nodes, then ``--resume`` from its checkpoint."""

from __future__ import annotations

import io
import json

import pytest

from tests.launch.conftest import run_pids
from tui.launch import commands
from tui.runs.record import latest_run_id

pytestmark = pytest.mark.slow


def _job(tiny_assets, max_steps: int) -> dict:
    return dict(
        workload="sft", method="lora", model=str(tiny_assets["model"]), dataset=str(tiny_assets["dataset"]),
        seq_len=64, micro_batch_size=2, grad_accum_steps=1, max_steps=max_steps, save_steps=5, logging_steps=1,
        learning_rate=1e-3, precision="fp32", optimizer="adamw", gradient_checkpointing=False, lora_r=4, lora_alpha=8,
        output_dir="checkpoints/tiny", stall_timeout_s=120, first_step_grace_s=300,
    )


def _progress_steps(run_dir) -> list[tuple[str, int, float]]:
    """(node/rank prefix, step, loss) of every progress line in the controller-side logs."""
    rows = []
    for log in sorted(run_dir.glob("node*.log")):
        for line in log.read_text().splitlines():
            prefix, _, text = line.partition(" | ")
            if text.startswith('{"ftwiz":"progress"'):
                obj = json.loads(text)
                rows.append((prefix, obj["step"], obj["loss"]))
    return rows


def test_lora_ten_steps_then_resume_continues_from_the_checkpoint(cluster3, tmp_path, monkeypatch, tiny_assets):
    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    config = cluster3.config(**_job(tiny_assets, 10))  # one CPU process per node
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    code = commands.launch(config, yes=True, detach=False, resume=False, force=False, checklist=False, printer=quiet)
    first = latest_run_id(runs)
    record = json.loads((runs / first / "run.json").read_text())
    assert code == 0, (record.get("reason"), record.get("failed"))
    # Loss logged by rank 0 (only), for every step 1..10.
    rows = _progress_steps(runs / first)
    assert rows and all(prefix.endswith("/0") for prefix, _, _ in rows)
    rank0_node = record["ranks"]["0"]["node"]
    assert all(prefix == f"{rank0_node}/0" for prefix, _, _ in rows)
    assert [step for _, step, _ in rows] == list(range(1, 11))
    assert all(loss is not None and loss > 0 for _, _, loss in rows)
    # Checkpoints written on every node (each node keeps its own: no shared filesystem assumed).
    for node in cluster3.nodes:
        assert (node.workdir / "checkpoints/tiny/checkpoint-10/trainer_state.json").is_file(), node.name
        assert (node.workdir / "checkpoints/tiny/final").is_dir()
    assert record["progress"]["last_checkpoint_step"] == 10

    # --resume: the next run starts after step 10, not at step 0.
    config = cluster3.config(**_job(tiny_assets, 14))
    code = commands.launch(config, yes=True, detach=False, resume=True, force=False, checklist=False, printer=quiet)
    second = latest_run_id(runs)
    assert second != first
    record = json.loads((runs / second / "run.json").read_text())
    assert code == 0, (record.get("reason"), record.get("failed"))
    assert record["resume"] is True and record["resumed_from"] == first
    steps = [step for _, step, _ in _progress_steps(runs / second)]
    assert steps and steps[0] == 11 and steps[-1] == 14, steps
    spec = json.loads((cluster3.nodes[1].workdir / "runs" / second / "job.json").read_text())
    assert spec["resume"] == "auto" and spec["output_dir"] == "checkpoints/tiny"
    assert not run_pids(second)
