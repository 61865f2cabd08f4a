"""``balance = "auto"`` under real torchrun on one machine (2 gloo ranks): DDP and FSDP train in the balanced loop."""

from __future__ import annotations

import pytest

from agent.workloads.tiny import TINY_JOB
from tests.workloads.helpers import run, torchrun_argv, write_spec

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_auto_balance_trains_and_reports_its_shares(rundir, tiny_model, tiny_dataset, tmp_path, sharding):
    job = {**TINY_JOB, "workload": "sft", "model": str(tiny_model), "dataset": str(tiny_dataset), "method": "lora",
           "sharding": sharding, "balance": "auto", "micro_batch_size": 2, "grad_accum_steps": 2, "max_steps": 4,
           "save_steps": 100, "output_dir": "ckpt", "learning_rate": 1e-3, "gradient_checkpointing": False}
    done = run(torchrun_argv(write_spec(tmp_path, **job), nproc=2), rundir, timeout=300)
    assert done.returncode == 0, done.output
    shares = [n.balance for n in done.kind("note") if n.balance is not None]
    assert shares and shares[0]["mode"] == "auto"
    ranks = shares[0]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and sum(r["samples_per_step"] for r in ranks) == 8  # 2 x 2 x 2 ranks
    if sharding == "fsdp":
        assert len({r["accum"] for r in ranks}) == 1  # every forward is a collective: the same micro-steps on each rank
    assert all(r["micro_batch"] <= 2 for r in ranks)
    losses = [p.loss for p in done.kind("progress")]
    assert len(losses) == 4 and all(loss > 0 for loss in losses)
    beats = [b for b in done.kind("heartbeat") if b.compute_s is not None]
    assert {b.rank for b in beats} == {0, 1}
    assert all((b.sync_s is not None) == (sharding == "ddp") for b in beats)
    final = [d for d in done.kind("done") if d.rank == 0][0]
    assert final.throughput["steps"] == 3 and final.throughput["tokens_per_s"] > 0
    assert (tmp_path / "ckpt" / "final").is_dir()
