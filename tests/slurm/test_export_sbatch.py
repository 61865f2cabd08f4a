"""``ftwiz --export-sbatch FILE`` submitted with plain ``sbatch`` to a real Slurm: the job runs everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cluster.slurm import SlurmCluster
from tests.slurm.helpers import ftwiz, write_config


def test_exported_script_runs_the_allreduce_on_every_node(slurm3: SlurmCluster, tmp_path) -> None:
    config = write_config(slurm3, slurm3.shared_dir / "export.toml")
    script = slurm3.shared_dir / "job.sbatch"
    done = ftwiz(slurm3, "--config", str(config), "--export-sbatch", str(script))
    assert done.returncode == 0, done.stderr
    run_id = re.search(r"of run (\S+) to", done.stderr).group(1)  # type: ignore[union-attr]

    job = slurm3.sbatch(script)
    assert slurm3.wait_job_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=240) == "COMPLETED", \
        slurm3.log_tails()
    rundir = slurm3.shared_dir / "work" / "runs" / run_id
    assert f"on 3 node(s), master node0 ({slurm3.nodes[0].address})" in (rundir / f"slurm-{job}.out").read_text()
    started = []
    for node in ("node0", "node1", "node2"):
        assert (rundir / f"{node}.exit").read_text().strip() == "0"
        for line in (rundir / f"{node}.log").read_text().splitlines():
            if '"ftwiz":"started"' in line:
                started.append(json.loads(line.split(":", 1)[1]))
    # One rank per node, each on its own node (hostname), one world of 3; rank 0's sums were right.
    assert sorted(s["rank"] for s in started) == [0, 1, 2]
    assert sorted(s["hostname"] for s in started) == ["node0", "node1", "node2"]
    assert {s["world_size"] for s in started} == {3}
    results = [json.loads(line.split(":", 1)[1]) for node in ("node0", "node1", "node2")
               for line in (rundir / f"{node}.log").read_text().splitlines() if '"ftwiz":"allreduce"' in line]
    assert results and all(r["correct"] for r in results)


def test_exported_script_runs_the_lora_fine_tune(slurm3: SlurmCluster, tiny_assets: dict[str, Path]) -> None:
    """The configured fine-tune, not only the check: 3 steps of LoRA on the tiny model, one adapter saved."""
    job = (f'workload = "sft"\nmethod = "lora"\nmodel = "{tiny_assets["model"]}"\ndataset = "{tiny_assets["dataset"]}"\n'
           "seq_len = 64\nmicro_batch_size = 2\ngrad_accum_steps = 1\nmax_steps = 3\nsave_steps = 3\nlogging_steps = 1\n"
           'learning_rate = 1e-3\nprecision = "fp32"\noptimizer = "adamw"\ngradient_checkpointing = false\n'
           f'lora_r = 4\nlora_alpha = 8\noutput_dir = "{slurm3.shared_dir / "work" / "ckpt-lora"}"\n')
    config = write_config(slurm3, slurm3.shared_dir / "export-lora.toml", rendezvous_port=29561, job=job)
    script = slurm3.shared_dir / "lora.sbatch"
    done = ftwiz(slurm3, "--config", str(config), "--export-sbatch", str(script))
    assert done.returncode == 0, done.stderr
    run_id = re.search(r"of run (\S+) to", done.stderr).group(1)  # type: ignore[union-attr]
    job_id = slurm3.sbatch(script)
    state = slurm3.wait_job_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=400)
    rundir = slurm3.shared_dir / "work" / "runs" / run_id
    logs = {node: (rundir / f"{node}.log").read_text() for node in ("node0", "node1", "node2")}
    assert state == "COMPLETED", "\n".join(text[-1500:] for text in logs.values())
    steps = [json.loads(line.split(":", 1)[1]) for text in logs.values() for line in text.splitlines()
             if '"ftwiz":"progress"' in line]
    assert max(s["step"] for s in steps) == 3 and all(s["loss"] == s["loss"] for s in steps if "loss" in s)
    # One shared workdir: only the main process saves, once.
    assert (slurm3.shared_dir / "work" / "ckpt-lora" / "final" / "adapter_config.json").is_file()
