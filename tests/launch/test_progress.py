"""The progress model and the headless printer (pure; lines as the workloads print them)."""

from __future__ import annotations

import io

from shared.logprefix import split_rank
from shared.protocol import Allreduce, Checkpoint, Done, Error, Heartbeat, Progress, Started
from tui.launch.commands import HeadlessPrinter
from tui.launch.events import LogLine, NodeStateChanged, ProgressChanged, RunFinished, RunNodeState, RunNote, RunResult
from tui.launch.progress import ProgressModel, format_progress, parse_protocol


def _line(node: str, rank, text: str, received: float) -> LogLine:
    """A log line as the driver emits it: its protocol record parsed once, at the edge."""
    return LogLine(node, rank, text, received, parse_protocol(text))


def test_split_rank_and_parse_protocol():
    assert split_rank('[rank12]:{"ftwiz":"heartbeat","rank":12,"step":3}') == (12, '{"ftwiz":"heartbeat","rank":12,"step":3}')
    assert split_rank("W1122 torch warning") == (None, "W1122 torch warning")
    assert parse_protocol('{"ftwiz":"progress","step":1}') == Progress(step=1)
    assert parse_protocol("loss went down") is None
    assert parse_protocol('{"ftwiz": ') is None


def test_progress_eta_and_fields():
    model = ProgressModel()
    model.update("n0", 0, Started(rank=0, local_rank=0, world_size=2, pid=10), now=0.0)
    model.update("n1", 1, Started(rank=1, local_rank=0, world_size=2, pid=11), now=0.0)
    for step in range(1, 6):
        model.update("n0", 0, Progress(rank=0, step=step, total_steps=25, loss=3.0 - step * 0.1, learning_rate=2e-4, tokens_per_s=1500.0, epoch=step / 50), now=float(step * 2))
    snap = model.snapshot
    assert (snap.step, snap.total_steps, snap.world_size, snap.ranks_started) == (5, 25, 2, 2)
    assert abs(snap.loss - 2.5) < 1e-9 and snap.learning_rate == 2e-4 and snap.epoch == 0.1
    assert abs(snap.steps_per_s - 0.5) < 1e-9
    assert abs(snap.eta_s - 40.0) < 1e-9  # 20 steps left at 0.5 step/s
    assert model.ranks[1].node == "n1" and model.last_moved == {0: 10.0}
    line = format_progress(snap)
    assert "step 5/25" in line and "loss 2.5" in line and "ETA 0:40" in line and "1,500 tok/s" in line


def test_heartbeats_move_ranks_without_changing_the_snapshot():
    model = ProgressModel()
    assert model.update("n1", 3, Heartbeat(rank=3, step=7), now=5.0) is False
    assert model.last_moved[3] == 5.0 and model.last_step[3] == 7
    model.update("n1", 3, Error(rank=3, message="boom"), now=6.0)
    assert model.errors == [("n1", 3, "boom")]


def test_checkpoint_allreduce_and_done():
    model = ProgressModel()
    model.update("n0", 0, Started(rank=0, world_size=1))
    model.update("n0", 0, Checkpoint(rank=0, step=10, path="/x/checkpoint-10"))
    model.update("n0", 0, Allreduce(rank=0, size_bytes=1 << 20, algbw_gbps=1.0, busbw_gbps=1.5, correct=True))
    model.update("n0", 0, Done(rank=0, status="ok"))
    snap = model.snapshot
    assert snap.last_checkpoint_step == 10 and snap.ranks_done == 1 and snap.allreduce[0]["busbw_gbps"] == 1.5
    assert "ckpt @10" in format_progress(snap) and "busbw 1.5 GB/s" in format_progress(snap)


def test_headless_printer():
    out, err = io.StringIO(), io.StringIO()
    printer = HeadlessPrinter(out, err)
    printer(_line("node1", 2, '{"ftwiz":"started","rank":2,"local_rank":0,"world_size":4,"pid":9,"backend":"gloo"}', 0.0))
    printer(_line("node1", 2, '{"ftwiz":"heartbeat","rank":2,"step":1}', 0.0))
    printer(_line("node1", None, "W1122 a torchrun warning", 0.0))
    model = ProgressModel()
    model.update("node0", 0, Progress(rank=0, step=1, total_steps=10, loss=2.0))
    printer(ProgressChanged(model.snapshot))
    printer(NodeStateChanged("node1", RunNodeState.RUNNING, "pgid 5"))
    printer(RunNote("stopping every node: x", "error"))
    printer(RunFinished(RunResult("r1", "failed", 1, reason="torchrun on node1 exited with code 1", failed_node="node1", failed_rank=2,
                                  last_lines=["node1/2 | Traceback"], unreaped=["node2"])))
    text = out.getvalue()
    assert "node1/2 | started: rank 2 of 4" in text and "heartbeat" not in text
    assert "node1/- | W1122 a torchrun warning" in text and "progress | step 1/10  loss 2" in text
    notes = err.getvalue()
    assert "node1: running (pgid 5)" in notes and "ERROR: stopping every node" in notes
    assert "failed: node node1 rank 2" in notes and "    node1/2 | Traceback" in notes
    assert "ftwiz --stop r1" in notes


def test_a_checkpoint_is_said_once_and_not_by_repeating_the_step_line():
    out = io.StringIO()
    printer = HeadlessPrinter(out, io.StringIO())
    model = ProgressModel()
    model.update("node0", 0, Progress(rank=0, step=10, total_steps=20, loss=2.0))
    printer(ProgressChanged(model.snapshot))
    model.update("node0", 0, Checkpoint(rank=0, step=10, path="/ckpt/step-10"))
    printer(ProgressChanged(model.snapshot))
    model.update("node0", 0, Progress(rank=0, step=11, total_steps=20, loss=1.9))
    printer(ProgressChanged(model.snapshot))
    model.update("node0", 0, Progress(rank=0, step=12, total_steps=20, loss=1.8))
    model.update("node0", 0, Checkpoint(rank=0, step=12, path="/ckpt/step-12"))
    printer(ProgressChanged(model.snapshot))  # a step and a checkpoint together: one line with both
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("progress | step 10/20  loss 2") and "ckpt" not in lines[0], lines
    assert lines[1] == "progress | checkpoint saved at step 10", lines
    assert lines[2].startswith("progress | step 11/20") and lines[2].endswith("ckpt @10"), lines
    assert lines[3].startswith("progress | step 12/20") and lines[3].endswith("ckpt @12") and len(lines) == 4, lines


def test_node_side_errors_print_as_they_come_and_lead_the_failure():
    out, err = io.StringIO(), io.StringIO()
    printer = HeadlessPrinter(out, err)
    printer(_line("here", 0, '{"ftwiz":"started","rank":0,"local_rank":0,"world_size":2,"pid":9,"backend":null}', 0.0))
    printer(_line("here", 0, '{"ftwiz":"error","rank":0,"message":"trian.py not found in /p/code: did you mean train.py?"}', 0.0))
    assert "here/0 | started: rank 0 of 2 (local 0, pid 9)\n" in out.getvalue()  # no "None" for a backend nobody named
    assert "here/0 | ERROR: trian.py not found in /p/code: did you mean train.py?" in out.getvalue()
    printer(RunFinished(RunResult("r1", "failed", 1, reason="rank 0 on here exited with code 2", failed_node="here", failed_rank=0)))
    assert "first error from the nodes: here/0: trian.py not found" in err.getvalue()


def test_a_progress_total_gives_a_plain_loop_its_eta():
    from tui.launch.progress import ProgressSnapshot

    model = ProgressModel(snapshot=ProgressSnapshot(total_steps=100))  # [job] progress_total = 100
    for step in range(1, 5):  # what progress_regex makes of "iter N: loss X, time Yms": no total
        model.update("n0", 0, Progress(source="progress_regex", step=step, loss=2.0), now=float(step))
    line = format_progress(model.snapshot)
    assert "step 4/100" in line and "ETA 1:36" in line  # 96 steps at 1 step/s


def _started(model, layout):
    for rank, node in enumerate(layout):
        model.update(node, rank, Started(rank=rank, world_size=len(layout), pid=100 + rank), now=0.0)


def test_heartbeat_timings_name_the_straggler_and_the_printer_shows_it():
    model = ProgressModel()
    _started(model, ["n0", "n1", "n2"])
    changed = []
    for step in range(1, 6):
        for rank, compute in enumerate([0.2, 0.2, 0.7]):
            sync = 0.02 if rank == 2 else 0.52  # the fast ranks wait for rank 2 in the all-reduce
            beat = Heartbeat(rank=rank, step=step, compute_s=compute, sync_s=sync)
            if model.update(f"n{rank}", rank, beat, now=float(step)):
                changed.append((step, rank))
    assert changed == [(3, 2)]  # named once, as soon as every rank has three steps
    assert model.snapshot.straggler == {"node": "n2", "rank": 2, "slowdown": 3.27, "why": "compute"}  # 0.72 / 0.22
    assert "straggler n2/r2 3.3x (compute)" in format_progress(model.snapshot)


def test_your_own_codes_straggler_from_the_node_helpers_samples():
    """No timings in the lines (workload = "command"): the rank whose main thread wants the CPU all the time
    while its peers sleep in the collective is named, by the ratio of the busy shares."""
    from tui.launch.messages import RankSample

    model = ProgressModel()
    _started(model, ["n0", "n1"])
    changed = []
    for tick in range(6):
        for rank, busy in ((0, 0.25), (1, 1.0)):  # ns per 1 s tick: rank 1 held by a quota, rank 0 waits for it
            sample = RankSample(rank, 100 + rank, "R", 0, 0, run_ns=int(tick * busy * 0.5e9), wait_ns=int(tick * busy * 0.5e9))
            if model.sampled(f"n{rank}", [sample], float(tick)):
                changed.append(tick)
    assert changed == [3]  # named once, as soon as both ranks have four samples
    assert model.snapshot.straggler == {"node": "n1", "rank": 1, "slowdown": 4.0, "why": "compute"}
    assert "straggler n1/r1 4.0x (compute)" in format_progress(model.snapshot)
    # a recipe's heartbeat timings take over from the samples
    model.update("n0", 0, Heartbeat(rank=0, step=1, compute_s=0.3, sync_s=0.05), now=7.0)
    assert not model.sampled("n0", [RankSample(0, 100, "R", 0, 0, run_ns=10**10, wait_ns=0)], 8.0)


def test_the_straggler_a_run_had_outlives_its_ending():
    """A stop (or a failure) kills the ranks one by one: the slow rank's samples stop while its peers' last
    ones look alike. Once the run began to end, the straggler it had stays named (CI: run.json's straggler
    was null after a stop, though the run had named rank 1 a moment before)."""
    from tui.launch.messages import RankSample

    model = ProgressModel()
    _started(model, ["n0", "n1"])
    for tick in range(6):
        for rank, busy in ((0, 0.25), (1, 1.0)):
            model.sampled(f"n{rank}", [RankSample(rank, 100 + rank, "R", 0, 0, run_ns=int(tick * busy * 1e9), wait_ns=0)], float(tick))
    named = model.snapshot.straggler
    assert named is not None and named["rank"] == 1
    model.settled = True
    for tick in range(6, 20):  # the ranks die: rank 1's replacement process and an idle rank 0 look even
        for rank in (0, 1):
            assert not model.sampled(f"n{rank}", [RankSample(rank, 200 + rank, "S", 0, 0, run_ns=tick * 10**8, wait_ns=0)], float(tick))
    assert model.snapshot.straggler == named


def test_an_even_run_names_nobody_and_plain_heartbeats_change_nothing():
    model = ProgressModel()
    _started(model, ["n0", "n1"])
    for step in range(1, 10):
        for rank in (0, 1):
            assert not model.update("n0", rank, Heartbeat(rank=rank, step=step, compute_s=0.3, sync_s=0.05), now=1.0)
    assert model.snapshot.straggler is None and "straggler" not in format_progress(model.snapshot)


def test_the_wizards_log_reads_the_typed_record_started_notes_and_errors_in_words_the_rest_hidden():
    from tui.app.launch_session import _readable

    started = _line("n0", 1, '{"ftwiz":"started","rank":1,"world_size":2,"local_rank":0,"pid":7,"backend":"gloo"}', 0.0)
    assert _readable(started) == "started: rank 1 of 2 (local 0, pid 7, gloo)"
    assert _readable(_line("n0", 0, '{"ftwiz":"note","rank":0,"message":"fp32 on CPU"}', 0.0)) == "note: fp32 on CPU"
    assert _readable(_line("n0", 0, '{"ftwiz":"error","rank":0,"message":"boom"}', 0.0)) == "error: boom"
    assert _readable(_line("n0", 0, '{"ftwiz":"heartbeat","rank":0,"step":3}', 0.0)) is None
    assert _readable(_line("n0", 0, '{"ftwiz":"bogus","rank":0}', 0.0)) == '{"ftwiz":"bogus","rank":0}'
    assert _readable(_line("n0", None, "plain torchrun line", 0.0)) == "plain torchrun line"
