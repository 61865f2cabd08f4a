"""Stop-all under faults: a killed rank, a hung rank, a cut link, a refused sshd.

Each test checks the guarantee itself: every process carrying the run's ``FTWIZ_RUN_ID`` on every
node is gone (a /proc scan), within the issue's bound, with the culprit named.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import psutil
import pytest

from tests.launch.conftest import RunThread, long_allreduce, make_run, rank_pid, run_pids, wait_until
from tui.launch.links import LinkLost, SshLink
from tui.launch.run import LaunchError, RunOptions

pytestmark = pytest.mark.slow


def test_sigkill_one_rank_stops_everything_within_10s(cluster3, tmp_path):
    run = make_run(long_allreduce(cluster3), tmp_path)
    watched = RunThread(run).start()
    assert watched.wait_ranks(4, 120), watched.notes()
    victim = rank_pid(run.run_id, 2)
    victim_node = run.progress.ranks[2].node
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    gone = wait_until(lambda: not run_pids(run.run_id), 10)
    elapsed = time.monotonic() - killed_at
    result = watched.join(60)
    assert gone, f"still running {elapsed:.1f} s after the SIGKILL: {run_pids(run.run_id)}"
    assert result.exit_code != 0 and result.status == "failed"
    assert (result.failed_node, result.failed_rank) == (victim_node, 2), result
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert record["failed"]["node"] == victim_node and record["failed"]["rank"] == 2
    assert record["failed"]["last_lines"]
    assert "SIGKILL" in "\n".join(result.last_lines) or "-9" in "\n".join(result.last_lines)


def test_sigstop_one_rank_is_a_stall_stopped_within_30s_with_stacks(cluster3, tmp_path):
    config = long_allreduce(cluster3, stall_timeout_s=20, first_step_grace_s=120)
    run = make_run(config, tmp_path, options=RunOptions(dump_wait_s=2.0))
    watched = RunThread(run).start()
    assert watched.wait_ranks(4, 120), watched.notes()
    victim = rank_pid(run.run_id, 3)
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        gone = wait_until(lambda: not run_pids(run.run_id), 30)
    finally:
        if run_pids(run.run_id):
            os.kill(victim, signal.SIGCONT)
    result = watched.join(60)
    assert gone, f"still running {time.monotonic() - stopped_at:.1f} s after SIGSTOP"
    assert result.status == "failed" and result.exit_code != 0
    assert "stall" in result.reason
    assert 3 in result.stalled_ranks
    # The stack dumps of the ranks that could answer are in the logs; the stopped one is named.
    dumped = {l.rank for l in watched.lines() if "most recent call first" in l.text}
    assert dumped >= {0, 1, 2}, dumped
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert 3 in record["stack_dump_silent"]
    assert result.failed_rank == 3
    node_log = (tmp_path / "runs" / run.run_id / f"{run.progress.ranks[0].node}.log").read_text()
    assert "most recent call first" in node_log


def test_sigstop_before_the_first_step_is_caught_within_the_stall_window_not_the_grace(cluster3, tmp_path):
    """A rank stopped before step 1 (the others then block in the rendezvous/first collective) is a
    hang found by the node's process samples within ``stall_timeout_s``, not after the 30 min grace."""
    config = long_allreduce(cluster3, stall_timeout_s=20)
    assert config.job.first_step_grace_s >= 1800  # the default grace, untouched
    run = make_run(config, tmp_path, options=RunOptions(dump_wait_s=2.0))
    watched = RunThread(run).start()
    victim = wait_until(lambda: rank_pid(run.run_id, 1), 120, interval=0.02)
    assert victim is not None, watched.notes()
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    assert not run.progress.last_moved, "the rank must be stopped before anyone's first step"
    try:
        gone = wait_until(lambda: not run_pids(run.run_id), 120)
    finally:
        if run_pids(run.run_id):
            os.kill(victim, signal.SIGCONT)
    elapsed = time.monotonic() - stopped_at
    result = watched.join(60)
    print(f"SIGSTOP before step 1 -> every process gone in {elapsed:.1f} s (stall_timeout_s 20)")
    assert gone, f"still running {elapsed:.1f} s after SIGSTOP: {run_pids(run.run_id)}"
    assert result.status == "failed" and "hang before the first step" in result.reason, result
    assert "rank(s) 1 stopped" in result.reason, result.reason
    assert result.failed_rank == 1
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert record["hang"]["before_first_step"] and record["hang"]["suspects"] == [1]
    assert record["hang"]["ranks"]["1"]["state"] == "T"


def test_cut_link_stops_the_others_and_reaps_the_node_when_it_is_back(cluster3, tmp_path):
    config = long_allreduce(cluster3, gpus=(1, 1, 1), stall_timeout_s=300)
    config.cluster.ssh_keepalive_s = 2.0
    run = make_run(config, tmp_path, options=RunOptions(reap_for_s=90))
    watched = RunThread(run).start()
    assert watched.wait_ranks(3, 120), watched.notes()
    node2 = cluster3.node("node2")
    node2.link_down()
    cut_at = time.monotonic()
    try:
        others_gone = wait_until(lambda: not run_pids(run.run_id, "node0") and not run_pids(run.run_id, "node1"), 20)
        others_elapsed = time.monotonic() - cut_at
        left_on_node2 = run_pids(run.run_id, "node2")
    finally:
        node2.link_up()
    assert others_gone, f"node0/node1 still running {others_elapsed:.1f} s after the cut"
    assert left_on_node2, "node2's processes died on their own: the reaping path was not exercised"
    reaped = wait_until(lambda: not run_pids(run.run_id), 60)
    result = watched.join(90)
    assert reaped, f"node2's leftovers were not reaped: {run_pids(run.run_id)}"
    assert result.status == "failed" and result.failed_node == "node2"
    assert "stopped answering" in result.reason
    assert result.unreaped == []
    # node2 was contacted once back (its ranks may also have died on their own when the link returned).
    assert any("answers again" in n for n in watched.notes()), watched.notes()


def test_refused_sshd_at_launch_is_a_clear_error_and_nothing_runs(cluster3, tmp_path):
    config = long_allreduce(cluster3, gpus=(1, 1, 1))
    cluster3.node("node1").stop_sshd()
    run = make_run(config, tmp_path)
    with pytest.raises(LaunchError) as caught:
        run.launch()
    message = str(caught.value)
    assert "node1" in message and "refused" in message and "sshd" in message, message
    assert list(caught.value.problems) == ["node1"]
    time.sleep(1.0)
    assert not run_pids(run.run_id)
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert record["status"] == "launch_failed"


def test_every_node_silent_at_once_keeps_the_run_and_reattaches(cluster3, tmp_path):
    """The operator's side of the network goes (SSH to every node dropped, the nodes still talk to
    each other): the run is kept, and supervision resumes once the nodes answer again."""
    config = long_allreduce(cluster3, gpus=(1, 1, 1), stall_timeout_s=300)
    config.cluster.ssh_keepalive_s = 1.0  # silent after 4 s
    run = make_run(config, tmp_path, options=RunOptions(reap_connect_timeout_s=2.0))
    watched = RunThread(run).start()
    try:
        assert watched.wait_ranks(3, 120), watched.notes()
        for node in cluster3.nodes:
            node.nft_block_port(22)
        try:
            assert wait_until(lambda: any("every node stopped answering" in n for n in watched.notes()), 20), watched.notes()
            time.sleep(3.0)
            assert watched.finished_at is None, watched.notes()
            for name in ("node0", "node1", "node2"):
                assert run_pids(run.run_id, name), f"{name}'s processes were stopped"
        finally:
            for node in cluster3.nodes:
                node.nft_flush()
        assert wait_until(lambda: any("answers again" in n for n in watched.notes()), 60), watched.notes()
        beats = len([l for l in watched.lines() if '"heartbeat"' in l.text])
        assert wait_until(lambda: len([l for l in watched.lines() if '"heartbeat"' in l.text]) > beats + 3, 60)
        assert watched.finished_at is None
    finally:
        run.request_stop("test over")
    result = watched.join(60)
    assert result.status == "stopped" and not run_pids(run.run_id)


def test_an_ssh_connection_that_dies_during_a_command_is_a_lost_link_not_an_exit_status(cluster3):
    """The sshd processes serving a node's connection killed while a command runs there: the link says LinkLost (the
    runner drops it and reconnects), never exit status -1, which read as the command's own failure ("the node-side
    helper failed", "run not found")."""
    config = cluster3.config(workload="allreduce")
    link = SshLink(config.nodes[1], config.cluster)
    command = f"sleep 300.{os.getpid()}"  # one process on this machine runs exactly this
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = link.exec(command, timeout=120)
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    sleeper = wait_until(lambda: next((p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == command.split()), None), 30)
    assert sleeper is not None, outcome
    try:
        # the connection's own sshd processes (its privileged monitor and the session), children of the node's
        # listener, which stays: the node is fine, only this connection dies
        serving = [p for p in sleeper.parents() if p.name() == "sshd" and p.parent() is not None and p.parent().name() == "sshd"]
        assert serving, [(p.pid, p.cmdline()) for p in sleeper.parents()]
        for process in serving:
            process.kill()
        thread.join(60)
    finally:
        sleeper.kill()
        link.close()
    assert not thread.is_alive() and isinstance(outcome.get("error"), LinkLost), outcome
    assert "closed during the command" in str(outcome["error"]), outcome
