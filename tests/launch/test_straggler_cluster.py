"""The straggler named in a real run: three namespace nodes, a LoRA fine-tune of the tiny model under torchrun.

One node's ranks held to a fraction of a core by a CPU-quota cgroup → that node is named (compute); one
node's link shaped with ``tbf`` → that node is named (network). Each waits for the state it asserts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.checks import shaping
from tests.doctor.cgroup import CpuCgroup, require_cpu_cgroup
from tests.launch.conftest import RunThread, make_run, rank_pid, rank_pids, run_pids, wait_until
from tui.launch import commands
from tui.runs.record import latest_run_id

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _job(tiny_assets, **overrides) -> dict:
    job = {
        "workload": "sft", "method": "lora", "model": str(tiny_assets["model"]), "dataset": str(tiny_assets["dataset"]),
        "seq_len": 64, "micro_batch_size": 4, "grad_accum_steps": 1, "max_steps": 100000, "save_steps": 100000,
        "logging_steps": 5, "learning_rate": 1e-3, "precision": "fp32", "optimizer": "adamw", "gradient_checkpointing": False,
        "lora_r": 4, "lora_alpha": 8, "output_dir": "checkpoints/straggler", "stall_timeout_s": 300, "first_step_grace_s": 300,
    }
    return {**job, **overrides}


def _named(run, node: str, why: str):
    found = run.progress.snapshot.straggler
    return found if found and found["node"] == node and found["why"] == why else None


def _beats(run_dir, last: int = 6) -> dict:
    """Each rank's last timings from the heartbeats in the controller-side logs (for a failure message)."""
    beats: dict = {}
    for log in run_dir.glob("*.log"):
        for line in log.read_text().splitlines():
            text = line.partition(" | ")[2]
            if text.startswith('{"ftwiz":"heartbeat"'):
                beat = json.loads(text)
                beats.setdefault((log.stem, beat["rank"]), []).append((beat.get("compute_s"), beat.get("sync_s")))
    return {key: values[-last:] for key, values in beats.items()}


def _stop(run, watched) -> dict:
    run.request_stop("test over")
    result = watched.join(120)
    assert result.status == "stopped" and not run_pids(run.run_id)
    return json.loads((run.record.path).read_text())


def test_a_node_held_to_a_twentieth_of_a_core_is_named_compute(cluster3, tmp_path, tiny_assets):
    require_cpu_cgroup()
    run = make_run(cluster3.config(**_job(tiny_assets)), tmp_path)
    watched = RunThread(run).start()
    with CpuCgroup(0.05) as slow:  # well under what a rank gets on a busy 2-core machine anyway
        try:
            assert wait_until(lambda: len(run.progress.timings) >= 3 or watched.finished_at, 300), watched.notes()
            assert watched.finished_at is None, watched.notes()
            assert rank_pid(run.run_id, 1) is not None
            node = run.progress.ranks[1].node
            for pid in rank_pids(run.run_id, 1):  # the rank's process and any it started
                slow.add(pid)
            step = max(run.progress.last_step.values())
            # the decision looks at a window of steps: wait (in steps, not seconds) until the slow ones fill it
            found = wait_until(lambda: _named(run, node, "compute") or watched.finished_at, 600)
            assert found and not watched.finished_at, (run.progress.snapshot.straggler, watched.notes())
            assert max(run.progress.last_step.values()) - step <= 20, ("named later than ~20 steps after the slowdown", _beats(run.record.dir, 40))
            assert found["rank"] == 1 and found["slowdown"] >= 1.3
        finally:
            record = _stop(run, watched)
    assert record["straggler"] is not None and record["straggler"]["node"] == node


def test_a_node_on_a_shaped_link_is_named_network(cluster3, tmp_path, tiny_assets, monkeypatch):
    """Every rank waits equally long in a ring all-reduce, so the run alone cannot tell whose link is slow:
    the launch's checklist measures the mesh first, and the decision names the node whose own link it found
    slow once the sync sets the pace."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    config = cluster3.config(**_job(tiny_assets, method="full", max_steps=40, logging_steps=10))  # every gradient crosses
    slow = cluster3.nodes[2]
    shaping.shape_node(slow, 8)
    try:
        quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
        code = commands.launch(config, yes=True, detach=False, resume=False, force=True, checklist=True, printer=quiet)
    finally:
        shaping.clear(cluster3.nodes)
    record = json.loads((runs / latest_run_id(runs) / "run.json").read_text())
    assert code == 0, (record.get("reason"), record.get("failed"))
    assert record["straggler"] is not None, (_beats(runs / latest_run_id(runs)), [r["node"] for r in record["checklist"] if r["id"] == "net.mesh"])
    assert (record["straggler"]["node"], record["straggler"]["why"]) == (slow.name, "network"), record["straggler"]


def test_your_own_codes_rank_held_to_a_twentieth_of_a_core_is_named_compute(cluster3, tmp_path):
    """workload = "command": no timings in the script's lines; the node helper's samples of each rank's process
    (its main thread on a CPU or waiting for one) name the rank the others wait for."""
    require_cpu_cgroup()
    config = cluster3.config(workload="command", command=["ddp_loop.py", "--steps", "100000", "--sleep", "0", "--work", "20"],
                             code_dir=str(Path(__file__).resolve().parent / "userscripts"),
                             progress_regex=r"step (?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[0-9.]+)",
                             stall_timeout_s=300, first_step_grace_s=300)
    run = make_run(config, tmp_path)
    watched = RunThread(run).start()
    with CpuCgroup(0.05) as slow:
        try:
            assert wait_until(lambda: (run.progress.snapshot.step or 0) >= 3 or watched.finished_at, 300), watched.notes()
            assert watched.finished_at is None, watched.notes()
            node = run.progress.ranks[1].node
            for pid in rank_pids(run.run_id, 1):
                slow.add(pid)
            found = wait_until(lambda: _named(run, node, "compute") or watched.finished_at, 300)
            assert found and not watched.finished_at, (run.progress.snapshot.straggler, watched.notes())
            assert found["rank"] == 1 and found["slowdown"] >= 1.3
        finally:
            record = _stop(run, watched)
    assert record["straggler"] is not None and record["straggler"]["node"] == node
