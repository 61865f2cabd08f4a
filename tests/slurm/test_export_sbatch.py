"""``ftwiz --export-sbatch FILE`` submitted with plain ``sbatch`` to a real Slurm: the job runs everywhere."""

from __future__ import annotations

import json
import re

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
