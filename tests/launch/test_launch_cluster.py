"""Real launches on three namespace nodes (real sshd, real torchrun, gloo on CPU)."""

from __future__ import annotations

import json

import pytest

from tests.launch.conftest import RunThread, make_run, run_pids

pytestmark = pytest.mark.slow


def test_allreduce_on_2_1_1_processes(cluster3, tmp_path):
    config = cluster3.config(workload="allreduce", sizes_mb=[0.5, 1], iterations=3, warmup_iterations=1)
    for node, count in zip(config.nodes, (2, 1, 1)):
        node.gpus = count
    run = make_run(config, tmp_path)
    watched = RunThread(run).start()
    result = watched.join(180)
    assert result.status == "succeeded", (result, watched.notes())
    assert result.exit_code == 0

    # Every rank 0..3 exactly once, world size 4, and the node of each rank recorded.
    started = [json.loads(l.text) for l in watched.lines() if '"ftwiz":"started"' in l.text]
    assert sorted(s["rank"] for s in started) == [0, 1, 2, 3]
    assert {s["world_size"] for s in started} == {4}
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert record["world_size"] == 4
    per_node = {}
    for rank, info in record["ranks"].items():
        per_node.setdefault(info["node"], []).append(int(rank))
    assert sorted(len(v) for v in per_node.values()) == [1, 1, 2] and len(per_node["node0"]) == 2

    # The sum was right at every size.
    rows = run.progress.snapshot.allreduce
    assert len(rows) == 2 and all(r["correct"] for r in rows)

    # The record: commands, exit codes, times; the controller-side logs carry node/rank prefixes.
    assert record["status"] == "succeeded" and record["ended_at"] >= record["started_at"]
    for name in ("node0", "node1", "node2"):
        node = record["nodes"][name]
        assert node["exit"] == "0"
        assert "torch.distributed.run" in node["command"]
        log = (tmp_path / "runs" / run.run_id / f"{name}.log").read_text()
        assert f"{name}/" in log
    assert not run_pids(run.run_id)
