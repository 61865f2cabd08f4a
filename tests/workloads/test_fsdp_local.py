"""The FSDP path on one machine under real torchrun (2 gloo ranks): activation checkpointing and the offload note."""

from __future__ import annotations

import pytest

from agent.workloads.tiny import TINY_JOB
from tests.workloads.helpers import run, torchrun_argv, write_spec

pytestmark = pytest.mark.slow


def _spec(directory, model, dataset, **overrides):
    job = {**TINY_JOB, "workload": "sft", "model": str(model), "dataset": str(dataset), "method": "full", "sharding": "fsdp",
           "max_steps": 4, "save_steps": 100, "output_dir": "ckpt", "learning_rate": 1e-3, "gradient_checkpointing": False,
           **overrides}
    return write_spec(directory, **job)


def test_activation_checkpointing_trains_the_same_steps(rundir, tiny_model, tiny_dataset, tmp_path):
    """Recomputing activations in backward must not change the numbers: same losses as without it."""
    plain = run(torchrun_argv(_spec(tmp_path / "plain", tiny_model, tiny_dataset), nproc=2), rundir, timeout=240)
    assert plain.returncode == 0, plain.output
    ckpt = run(torchrun_argv(_spec(tmp_path / "ckpt", tiny_model, tiny_dataset, gradient_checkpointing=True, fsdp_offload=True), nproc=2),
               rundir, timeout=240)
    assert ckpt.returncode == 0, ckpt.output
    losses = [p.loss for p in plain.kind("progress")]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert [p.loss for p in ckpt.kind("progress")] == pytest.approx(losses, rel=1e-4)
    notes = " ".join(n.message for n in ckpt.kind("note"))
    assert "fsdp_offload = true has nothing to offload without a GPU" in notes
    shards = [n for n in ckpt.kind("note") if n.shard_params is not None]
    assert sorted(n.rank for n in shards) == [0, 1]
    assert all(n.shard_params == pytest.approx(n.total_params / 2, rel=0.05) for n in shards)
    assert (tmp_path / "ckpt" / "ckpt" / "final" / "model.safetensors").is_file()
