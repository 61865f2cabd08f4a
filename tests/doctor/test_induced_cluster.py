"""oom.host through the launcher in the namespace cluster, told apart by what the nodes' kernels know.

One rank of a running all-reduce (40 MB tensors) is moved into a memory cgroup limited to 32 MB, so the kernel's OOM
killer kills it: the doctor says ``oom.host``, *confirmed* by that node's agent (``GET
/v1/kernel/oom/{pid}``). Another run's rank is SIGKILLed from outside: still ``oom.host`` by its exit,
but *unconfirmed*: the kernel has no OOM record of that pid. Both on the shared 3-node cluster.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.doctor.cgroup import MemoryCgroup, require_cgroups
from tests.doctor.induce import SCRIPT
from tests.launch.conftest import RunThread, long_allreduce, make_run, rank_pid
from tui.doctor import diagnose_run, format_first
from tui.doctor.kernel import agent_kernel_lookup

pytestmark = pytest.mark.slow


def _run_and_kill(cluster, tmp_path, kill) -> tuple:
    # 40 MB tensors: each iteration maps fresh pages, which the cgroup must charge (small ones reuse the heap).
    config = long_allreduce(cluster, sizes_mb=[40.0] * 2000, iterations=2)
    run = make_run(config, tmp_path)
    watched = RunThread(run).start()
    assert watched.wait_ranks(4, 150), watched.notes()
    victim = rank_pid(run.run_id, 2)
    node = run.progress.ranks[2].node
    assert victim is not None
    kill(victim)
    result = watched.join(120)
    assert result.status == "failed", result
    return config, tmp_path / "runs" / run.run_id, node, victim


def test_oom_killer_is_confirmed_and_an_outside_sigkill_is_not(cluster3, tmp_path):
    require_cgroups()
    with MemoryCgroup(32 << 20) as cgroup:
        config, run_dir, node, victim = _run_and_kill(cluster3, tmp_path / "oom", cgroup.add)
    found = diagnose_run(run_dir, kernel=agent_kernel_lookup(config))
    first = found[0]
    assert (first.cause, first.node, first.rank, first.confirmed) == ("oom.host", node, 2, True), [d.as_dict() for d in found]
    assert f"Killed process {victim}" in first.evidence[0].text
    assert "OOM killer" in format_first(found)
    # What follows the root cause is the peers losing rank 2: every reset is demoted to an echo.
    assert all(d.echo for d in found[1:] if d.cause == "net.peer_lost"), [(d.cause, d.node, d.rank, d.echo) for d in found]
    # The supervisor ran the doctor itself when the run failed: run.json keeps the list.
    stored = json.loads((run_dir / "run.json").read_text())["diagnoses"]
    assert (stored[0]["cause"], stored[0]["rank"], stored[0].get("confirmed")) == ("oom.host", 2, True), stored

    config, run_dir, node, victim = _run_and_kill(cluster3, tmp_path / "kill", lambda pid: os.kill(pid, signal.SIGKILL))
    found = diagnose_run(run_dir, kernel=agent_kernel_lookup(config))
    first = found[0]
    assert (first.cause, first.node, first.rank, first.confirmed) == ("oom.host", node, 2, False), [d.as_dict() for d in found]
    assert "not the OOM killer" in first.explanation


def test_code_error_on_rank_2_through_the_launcher(cluster3, tmp_path):
    """Your own script (workload = "command") raises on rank 2: the supervisor's own diagnosis names the
    file, line and node of rank 2, and the other ranks' lost connections come after it as echoes."""
    config = cluster3.config(workload="command", command=["train.py", "--fail", "code", "--steps", "8"], code_dir=str(SCRIPT.parent))
    for node in config.nodes:
        node.gpus = 1
    run = make_run(config, tmp_path)
    result = RunThread(run).start().join(240)
    assert result.status == "failed", result
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    stored = record["diagnoses"]
    first = stored[0]
    assert (first["cause"], first["rank"], first["node"]) == ("code.error", 2, record["ranks"]["2"]["node"]), stored
    assert "train.py:27 in check_batch" in first["explanation"] and "ValueError: batch on rank 2 has no labels" in first["explanation"]
    assert any(e["text"] == "ValueError: batch on rank 2 has no labels" for e in first["evidence"])
    # The other ranks' lost connections are demoted: none of them is taken for a cause.
    assert all(d.get("echo") for d in stored[1:] if d["cause"] == "net.peer_lost"), [(d["cause"], d["node"], d["rank"]) for d in stored]
