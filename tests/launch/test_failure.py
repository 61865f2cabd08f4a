"""Blaming the right node and rank from torchrun's failure summaries (pure; summary text as torchrun prints it)."""

from __future__ import annotations

from shared.torchrun_failures import describe_worker_exit, is_stack_dump
from tui.launch.failure import FailureTracker, describe_exit


def _summary(failures: list[tuple[int, int, str]], root: tuple[int, int, str]) -> list[str]:
    """torchrun's ChildFailedError summary (torch 2.x layout)."""
    lines = ["============================================================", "ftwiz_workloads FAILED",
             "------------------------------------------------------------", "Failures:"]
    if not failures:
        lines.append("  <NO_OTHER_FAILURES>")
    for i, (rank, local, code) in enumerate(failures, 1):
        lines += [f"[{i}]:", "  time      : 2026-11-22_06:12:24", "  host      : localhost", f"  rank      : {rank} (local_rank: {local})",
                  f"  exitcode  : {code}", "  error_file: <N/A>"]
    rank, local, code = root
    lines += ["------------------------------------------------------------", "Root Cause (first observed failure):", "[0]:",
              "  time      : 2026-11-22_06:12:24", "  host      : localhost", f"  rank      : {rank} (local_rank: {local})",
              f"  exitcode  : {code}", "  error_file: <N/A>", "============================================================"]
    return lines


def _feed(tracker: FailureTracker, node: str, lines: list[str], rank=None) -> None:
    for text in lines:
        tracker.observe(node, rank, text, f"{node}/{'-' if rank is None else rank} | {text}", chatter=False)


def test_a_worker_killed_by_a_signal_is_blamed_over_peers_that_lost_it():
    tracker = FailureTracker(["node0", "node1"])
    # node0's workers failed first (their peer vanished); node1's rank 2 was SIGKILLed.
    _feed(tracker, "node0", _summary([(1, 1, "-15 (pid: 7)  (SIGTERM)")], (0, 0, "1 (pid: 6) ")))
    _feed(tracker, "node1", ["Traceback (most recent call last):"], rank=2)
    _feed(tracker, "node1", _summary([], (2, 0, "-9 (pid: 9)  (SIGKILL)")))
    assert [(c["node"], c["rank"], c["exitcode"]) for c in tracker.root_causes] == [("node0", 0, 1), ("node1", 2, -9)]
    assert tracker.attribute("node0", None, rank_nodes={}) == ("node1", 2)
    last = tracker.last_lines("node1", 2, 50)
    assert "node1/2 | Traceback (most recent call last):" in last and any("-9 (pid: 9)" in l for l in last)


def test_our_own_sigterm_is_not_a_cause_and_the_trigger_node_wins():
    tracker = FailureTracker(["node0", "node1"])
    _feed(tracker, "node0", _summary([], (0, 0, "-15 (pid: 6)  (SIGTERM)")))
    _feed(tracker, "node1", _summary([], (3, 1, "2 (pid: 8) ")))
    assert tracker.attribute("node1", None, rank_nodes={}) == ("node1", 3)
    assert tracker.attribute(None, 5, rank_nodes={5: "node0"}) == ("node0", 5)  # a stall names its rank
    assert tracker.attribute("node1", None, rank_nodes={}, errors=[("node1", 4, "bad")]) == ("node1", 3)


def test_errors_are_used_without_a_summary_and_stack_dumps_are_seen():
    tracker = FailureTracker(["node0"])
    assert tracker.attribute("node0", None, rank_nodes={}, errors=[("node0", 1, "dataset line 7")]) == ("node0", 1)
    tracker.observe("node0", 3, "Thread 0x00007f5e8a3ff640 (most recent call first):", "x", chatter=False)
    tracker.observe("node0", 2, "Current thread 0x00007f5e8c1b0740 (most recent call first):", "x", chatter=False)
    assert tracker.dumped == {2, 3} and is_stack_dump("Thread 0x1 (most recent call first):")
    tracker.reset_dumps()
    assert tracker.dumped == set()


def test_describe_exit():
    assert describe_exit("0") == "exited with code 0"
    assert describe_exit("137") == "exited with code 137 (SIGKILL)"
    assert describe_exit("gone") == "ended by a signal (no exit code)"
    assert describe_exit("stopped") == "stopped by ftwiz"


def test_torchruns_worker_failed_line_is_caught_and_named():
    tracker = FailureTracker(["node1"])
    line = ("E1122 06:12:24.825000 21357 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) "
            "local_rank: 0 (pid: 22005) of binary: /venv/bin/python")
    failure = tracker.observe("node1", None, line, "node1/- | " + line, chatter=False, pid_ranks={22005: 2})
    assert failure is not None and (failure["rank"], failure["exitcode"]) == (2, -9)
    assert describe_worker_exit(-9) == "was killed by SIGKILL" and describe_worker_exit(1) == "exited with code 1"
    assert tracker.attribute("node0", None, rank_nodes={2: "node1"}) == ("node1", 2)


def test_a_peers_abort_reported_first_does_not_hide_the_killed_rank():
    """gloo aborts (SIGABRT) a rank whose peer died; its node's torchrun may report before the killed rank's."""
    tracker = FailureTracker(["node0", "node1"])
    for node, exitcode, local, pid in (("node0", -6, 1, 101), ("node1", -9, 0, 202)):
        line = f"E1124 01:10:00.000000 1 api.py:1002] failed (exitcode: {exitcode}) local_rank: {local} (pid: {pid}) of binary: /venv/bin/python"
        tracker.observe(node, None, line, f"{node}/- | {line}", chatter=False, pid_ranks={101: 1, 202: 2})
    assert tracker.attribute("node0", None, rank_nodes={1: "node0", 2: "node1"}) == ("node1", 2)


def test_a_peer_that_only_echoes_the_lost_rank_is_not_blamed_even_when_its_node_ends_first():
    """Rank 2 raised; rank 1 raised gloo's "Connection closed by peer" and rank 0 aborted (SIGABRT) as it went, and
    their nodes' torchrun reported first (seen in the namespace test of a script raising on rank 2)."""
    tracker = FailureTracker(["node0", "node1", "node2"])
    _feed(tracker, "node0", _summary([], (0, 0, "-6 (pid: 5)  (SIGABRT)")))
    _feed(tracker, "node1", _summary([], (1, 0, "1 (pid: 6) ")))
    _feed(tracker, "node2", _summary([], (2, 0, "1 (pid: 7) ")))
    errors = [("node1", 1, "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                           "[10.130.22.13]:54446. This is typically caused by a remote worker crashing."),
              ("node2", 2, "RuntimeError: simulated data error on rank 2 at ddp_loop.py:35 in main")]
    for trigger in ("node0", "node1", "node2"):
        assert tracker.attribute(trigger, None, rank_nodes={}, errors=errors) == ("node2", 2), trigger
    # without the summaries, the error lines alone say the same
    assert FailureTracker(["node1", "node2"]).attribute("node1", None, rank_nodes={}, errors=errors) == ("node2", 2)
    # an echo is still blamed when it is all there is
    assert FailureTracker(["node1"]).attribute("node1", None, rank_nodes={}, errors=errors[:1]) == ("node1", 1)


def test_one_parser_reads_torchrun_failure_lines_for_the_run_and_for_why(tmp_path):
    """shared.torchrun_failures is what the live blame and --why both read torchrun's failure lines with."""
    from shared.torchrun_failures import root_cause_rank, says_a_worker_failed, summary_exit, worker_failed
    from tui.doctor import diagnose_files

    early = "[E ... api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /usr/bin/python"
    failed = worker_failed(early)
    assert failed is not None and (failed.exitcode, failed.local_rank, failed.pid) == (-9, 5, 2630)
    assert worker_failed("rank 0 failed to connect") is None
    assert root_cause_rank("  rank      : 3 (local_rank: 1)") == (3, 1)
    ended = summary_exit("  exitcode  : -9 (pid: 2630)")
    assert ended is not None and (ended.exitcode, ended.pid) == (-9, 2630)
    ended = summary_exit("  exitcode  : 1")
    assert ended is not None and (ended.exitcode, ended.pid) == (1, None)
    assert says_a_worker_failed(early) and says_a_worker_failed("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    assert not says_a_worker_failed("  exitcode  : 0")

    tracker = FailureTracker(["n"])
    live = tracker.observe("n", None, early, "n/- | " + early, chatter=False, pid_ranks={2630: 7})
    assert live is not None and (live["rank"], live["exitcode"]) == (7, -9)
    log = tmp_path / "n.log"
    log.write_text(f"n/- | {early}\n")
    found = diagnose_files([log])
    assert found and found[0].cause == "oom.host" and "pid 2630 was killed by SIGKILL" in str(found[0].as_dict())
