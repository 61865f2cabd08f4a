"""The Slurm test harness itself: real munged, slurmctld and slurmd in namespace nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cluster import reaper
from tests.cluster.slurm import SlurmCluster


def test_batch_job_runs_on_every_node_with_its_own_hostname(slurm3: SlurmCluster) -> None:
    assert slurm3.node_states() == {"node0": "idle", "node1": "idle", "node2": "idle"}
    script = slurm3.shared_dir / "hosts.sh"
    # Each task prints its hostname and what node0 resolves to inside that node (the private /etc/hosts).
    script.write_text("#!/bin/sh\nsrun --ntasks-per-node=1 sh -c 'echo $(hostname) $(getent hosts node0)'\n")
    out = slurm3.shared_dir / "hosts-%j.out"
    job = slurm3.sbatch(script, "-N", "3", "-o", str(out))
    assert slurm3.wait_job_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}) == "COMPLETED"
    lines = sorted(Path(str(out).replace("%j", job)).read_text().splitlines())
    master = slurm3.nodes[0].address
    assert [line.split() for line in lines] == [[f"node{i}", master, "node0"] for i in range(3)]


def test_teardown_leaves_nothing(slurm3: SlurmCluster) -> None:
    # A second cluster beside the module's one (own subnet, own namespaces), with a job still running at close.
    other = SlurmCluster.create(2)
    namespaces = [node.netns for node in other.nodes]
    script = other.shared_dir / "sleep.sh"
    script.write_text("#!/bin/sh\nsrun sleep 600\n")
    job = other.sbatch(script, "-N", "2", "-o", "/dev/null")
    other.wait_job_state(job, {"RUNNING"})
    assert any(reaper.namespace_pids(ns) for ns in namespaces)
    tmpdir = other.cluster.tmpdir
    assert other.close() == []
    assert not any(Path(f"/run/netns/{ns}").exists() for ns in namespaces)
    assert not tmpdir.exists()
    # No process of that cluster is left anywhere: its config path is in every daemon's argv and every job's env.
    conf = str(other.conf_path).encode()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if conf in Path(f"/proc/{pid}/cmdline").read_bytes() or conf in Path(f"/proc/{pid}/environ").read_bytes():
                left.append(pid)
        except OSError:
            continue
    assert left == []
    # The module's cluster is untouched.
    assert subprocess.run(["sinfo", "-h"], check=False, env=slurm3.env(), capture_output=True).returncode == 0
    assert set(slurm3.node_states().values()) == {"idle"}
