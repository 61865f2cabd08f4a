"""The supervisor's decisions, table by table: scripted observations, a fake clock, no nodes, no root.

Each case builds a :class:`Supervisor` over nodes ``a`` and ``b`` (three ranks: 0 and 1 on a, 2 on b),
started at t=0, applies a script of observations at given times, and checks the one decision at the
end. The driver around it (threads, SSH, the stop sequence) is tested by the namespace-cluster tests.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from tui.exitcodes import EXIT_FAILED
from tui.launch.events import RunNodeState
from tui.launch.messages import EndingKind, NodeEnding, RankSample
from tui.runs.status import RunStatus
from tui.launch.supervisor import Detach, Keep, Phase, StallFound, StopAll, Succeed, Supervisor, Timing, WorkerFailure

TIMING = Timing(unreachable_after_s=6.0, tick_s=1.0, reattach_for_s=60.0, reconnect_s=5.0, stall_timeout_s=20.0, first_step_grace_s=1800.0)
RANK_NODE = {0: "a", 1: "a", 2: "b"}


def new() -> Supervisor:
    sup = Supervisor.over(["a", "b"], TIMING, expected_ranks=3)
    sup.started(0.0)
    return sup


def hear_all(sup: Supervisor, until: float, *, skip: tuple[str, ...] = ()) -> None:
    """Every node ticks once a second up to ``until`` (except ``skip``)."""
    for name in sup.nodes:
        if name not in skip:
            sup.heard(name, until)


def sample(sup: Supervisor, at: float, **states: tuple[str, int, int]) -> None:
    """``rank0=("S", cpu, io)``: one sampling round of every rank given."""
    by_node: dict[str, list[RankSample]] = {}
    for key, (state, cpu, io) in states.items():
        rank = int(key.removeprefix("rank"))
        by_node.setdefault(RANK_NODE[rank], []).append(RankSample(rank, 1000 + rank, state, cpu, io))
    for node, samples in by_node.items():
        sup.sampled(node, samples, at)


Script = Callable[[Supervisor], float]


def ok_everywhere(sup: Supervisor) -> float:
    sup.ended("a", NodeEnding.parse("0"))
    sup.ended("b", NodeEnding.parse("0"))
    return 5.0


def b_fails_first(sup: Supervisor) -> float:
    hear_all(sup, 3.0)
    sup.ended("b", NodeEnding.parse("1"))
    sup.ended("a", NodeEnding.parse("137"))
    return 3.0


def a_signalled(sup: Supervisor) -> float:
    hear_all(sup, 2.0)
    sup.ended("a", NodeEnding.parse("gone"))
    return 2.0


def stopped_elsewhere(sup: Supervisor) -> float:
    hear_all(sup, 2.0)
    sup.ended("a", NodeEnding.parse("stopped"))
    return 2.0


def worker_died(sup: Supervisor) -> float:
    hear_all(sup, 4.0)
    sup.worker_failed(WorkerFailure("b", 2, 0, -9))
    return 4.0


def stop_beats_failure(sup: Supervisor) -> float:
    sup.ended("a", NodeEnding.parse("1"))
    sup.request_stop("stopped by the operator (SIGINT)")
    return 1.0


def detach(sup: Supervisor) -> float:
    hear_all(sup, 1.0)
    sup.request_detach()
    return 1.0


def one_node_silent(sup: Supervisor) -> float:
    hear_all(sup, 2.0)
    sup.heard("b", 9.8)
    return 10.0


def every_node_silent(sup: Supervisor) -> float:
    hear_all(sup, 2.0)
    return 10.0


def silent_too_long(sup: Supervisor) -> float:
    hear_all(sup, 2.0)
    assert isinstance(sup.decide(10.0), Keep)
    return 71.0


def stall_after_first_step(sup: Supervisor) -> float:
    for rank in (0, 1, 2):
        sup.rank_moved(rank, 30.0)
    sup.rank_moved(0, 50.0)
    sup.rank_moved(2, 50.0)
    hear_all(sup, 51.0)
    return 51.0


def stall_with_a_stopped_rank(sup: Supervisor) -> float:
    stall_after_first_step(sup)
    for t in range(30, 52):
        sample(sup, float(t), rank0=("S", 100, 0), rank1=("T", 100, 0), rank2=("S", 100, 0))
    return 51.0


def moving(sup: Supervisor) -> float:
    for rank in (0, 1, 2):
        sup.rank_moved(rank, 40.0)
    hear_all(sup, 45.0)
    return 45.0


def rank1_stopped_before_step1(sup: Supervisor) -> float:
    sample(sup, 1.0, rank0=("R", 10, 0), rank1=("R", 10, 0), rank2=("R", 10, 0))
    sample(sup, 5.0, rank0=("S", 90, 9_000_000), rank1=("T", 50, 4_000_000), rank2=("R", 80, 9_000_000))
    for t in range(6, 26):
        sample(sup, float(t), rank0=("S", 95, 9_100_000), rank1=("T", 50, 4_000_000), rank2=("S", 95, 9_100_000))
    hear_all(sup, 25.0)
    return 25.0


def rank1_stopped_not_long_enough(sup: Supervisor) -> float:
    rank1_stopped_before_step1(sup)
    return 24.0


def loading_keeps_grace(sup: Supervisor) -> float:
    # Rank 0 downloads (its I/O moves); ranks 1 and 2 wait for it in a barrier (idle): 10 minutes in.
    for t in range(1, 601):
        sample(sup, float(t), rank0=("S", 10 + t // 10, 1_000_000 * t), rank1=("S", 10, 100), rank2=("S", 10, 100))
    hear_all(sup, 600.0)
    return 600.0


def all_idle_one_never_arrived(sup: Supervisor) -> float:
    sup.rank_reached(0)
    sup.rank_reached(2)
    for t in range(1, 41):
        busy = t < 15
        sample(sup, float(t), rank0=("S", 10 + (t * 5 if busy else 70), 0), rank1=("S", 10 + (t * 5 if busy else 70), 0),
               rank2=("S", 10 + (t * 5 if busy else 70), 0))
    hear_all(sup, 40.0)
    return 40.0


def all_idle_nobody_said(sup: Supervisor) -> float:
    for t in range(1, 41):
        sample(sup, float(t), rank0=("S", 10, 0), rank1=("S", 10, 0), rank2=("S", 10, 0))
    hear_all(sup, 40.0)
    return 40.0


def a_rank_never_sampled(sup: Supervisor) -> float:
    for t in range(1, 41):
        sample(sup, float(t), rank0=("S", 10, 0), rank1=("S", 10, 0))
    hear_all(sup, 40.0)
    return 40.0


def first_step_grace_over(sup: Supervisor) -> float:
    hear_all(sup, 1801.0)
    return 1801.0


def rank_error_within_grace(sup: Supervisor) -> float:
    hear_all(sup, 11.0)
    sup.rank_errored("b", 2, "ValueError: batch on rank 2 has no labels", 10.0)
    return 11.0


def rank_error_after_grace(sup: Supervisor) -> float:
    rank_error_within_grace(sup)
    hear_all(sup, 12.5)
    return 12.5


def peer_error_then_torchrun_names_the_killed_rank(sup: Supervisor) -> float:
    hear_all(sup, 11.0)
    sup.rank_errored("a", 0, "RuntimeError: Connection closed by peer", 10.0)
    sup.worker_failed(WorkerFailure("b", 2, 0, -9))
    return 11.0


def lost_stream(sup: Supervisor) -> float:
    hear_all(sup, 3.0)
    sup.nodes["a"].lost = True
    return 3.0


CASES: list[tuple[str, Script, Callable[[Any], bool]]] = [
    ("nothing happened yet", lambda s: (hear_all(s, 1.0), 1.0)[1], lambda d: d == Keep()),
    ("every node exited 0", ok_everywhere, lambda d: isinstance(d, Succeed)),
    ("the first node to fail is blamed", b_fails_first,
     lambda d: isinstance(d, StopAll) and d.status is RunStatus.FAILED and d.trigger_node == "b" and "exited with code 1" in d.reason),
    ("a group gone without an exit code fails the run", a_signalled,
     lambda d: isinstance(d, StopAll) and d.trigger_node == "a" and "signal" in d.reason),
    ("another ftwiz stopped it", stopped_elsewhere, lambda d: isinstance(d, StopAll) and d.status is RunStatus.STOPPED and "--stop" in d.reason),
    ("torchrun reports a dead worker", worker_died,
     lambda d: isinstance(d, StopAll) and d.trigger_node == "b" and "rank 2" in d.reason and "SIGKILL" in d.reason),
    ("the operator's stop wins and blames nobody", stop_beats_failure,
     lambda d: isinstance(d, StopAll) and d.status is RunStatus.STOPPED and d.trigger_node is None),
    ("detach", detach, lambda d: isinstance(d, Detach) and d.exit_code == 0),
    ("one node silent while the other answers", one_node_silent,
     lambda d: isinstance(d, StopAll) and d.unreachable == ("a",) and d.trigger_node == "a"),
    ("every node silent: our side, keep going and reconnect", every_node_silent,
     lambda d: isinstance(d, Keep) and set(d.reconnect) == {"a", "b"} and d.notes and d.states == (("a", RunNodeState.RECONNECTING), ("b", RunNodeState.RECONNECTING))),
    ("every node silent past reattach_for_s: detach, failed", silent_too_long, lambda d: isinstance(d, Detach) and d.exit_code == EXIT_FAILED),
    ("a rank stops moving after the first step", stall_after_first_step,
     lambda d: isinstance(d, StallFound) and d.stalled == (1,) and not d.before_first_step),
    ("a stall names the rank stopped in state T as the odd one out", stall_with_a_stopped_rank,
     lambda d: isinstance(d, StallFound) and d.suspects == (1,) and "rank(s) 1 stopped (process state T)" in d.reason),
    ("every rank moves", moving, lambda d: d == Keep()),
    ("a rank stopped (T) before step 1 is caught after stall_timeout_s", rank1_stopped_before_step1,
     lambda d: isinstance(d, StallFound) and d.suspects == (1,) and d.before_first_step and "stopped" in d.reason),
    ("... not before", rank1_stopped_not_long_enough, lambda d: d == Keep()),
    ("a loading rank keeps the first-step grace", loading_keeps_grace, lambda d: d == Keep()),
    ("every rank idle, one never reached the process group", all_idle_one_never_arrived,
     lambda d: isinstance(d, StallFound) and d.suspects == (1,) and "never reached" in d.reason),
    ("every rank idle, none said anything: all named", all_idle_nobody_said,
     lambda d: isinstance(d, StallFound) and d.suspects == (0, 1, 2) and "idle" in d.reason),
    ("a rank not sampled yet may still be loading", a_rank_never_sampled, lambda d: d == Keep()),
    ("the first-step grace runs out", first_step_grace_over, lambda d: isinstance(d, StallFound) and "first_step_grace_s" in d.reason),
    ("a rank's error line waits error_grace_s for torchrun's own report", rank_error_within_grace, lambda d: d == Keep()),
    ("... then stops every rank, naming the erroring rank", rank_error_after_grace,
     lambda d: isinstance(d, StopAll) and d.status is RunStatus.FAILED and d.trigger_node == "b" and "rank 2 on b failed: ValueError" in d.reason),
    ("a peer's error is an echo when torchrun names a killed rank", peer_error_then_torchrun_names_the_killed_rank,
     lambda d: isinstance(d, StopAll) and d.trigger_node == "b" and "rank 2" in d.reason),
    ("a broken stream is reconnected", lost_stream, lambda d: isinstance(d, Keep) and d.reconnect == ("a",)),
]


@pytest.mark.parametrize("script,check", [(s, c) for _, s, c in CASES], ids=[name for name, _, _ in CASES])
def test_decision(script: Script, check: Callable[[Any], bool]) -> None:
    sup = new()
    now = script(sup)
    decision = sup.decide(now)
    assert check(decision), decision


def test_every_node_back_resumes_after_the_returning_grace() -> None:
    sup = new()
    sup.rank_moved(0, 1.0)
    hear_all(sup, 2.0)
    assert isinstance(sup.decide(10.0), Keep) and sup.phase is Phase.OFFLINE
    sup.heard("a", 30.0)
    d = sup.decide(30.0)  # a is back, b not yet: still within the returning grace
    assert isinstance(d, Keep) and d.reconnect == ("b",) and sup.phase is Phase.RETURNING
    hear_all(sup, 33.0)
    d = sup.decide(33.0)
    assert isinstance(d, Keep) and any("answers again" in text for _, text in d.notes) and sup.phase is Phase.RUNNING
    assert sup.last_moved[0] == 33.0, "the silence was ours: ranks are not blamed for it"
    sup.heard("a", 40.0)
    sup.heard("b", 40.0)
    assert isinstance(sup.decide(40.0), Keep)


def test_silent_node_after_return_grace_is_blamed() -> None:
    sup = new()
    hear_all(sup, 2.0)
    sup.decide(10.0)
    for t in range(30, 60):
        sup.heard("a", float(t))
        d = sup.decide(t + 0.5)  # the returning grace (6 s + 2 × 5 s) counts from the first node back
        if t < 45:
            assert isinstance(d, Keep), (t, d)
    assert isinstance(d, StopAll) and d.unreachable == ("b",)


def test_a_decision_other_than_keep_ends_supervision() -> None:
    sup = new()
    sup.ended("a", NodeEnding.parse("0"))
    sup.ended("b", NodeEnding.parse("0"))
    assert isinstance(sup.decide(1.0), Succeed)
    assert sup.phase is Phase.OVER


@pytest.mark.parametrize(
    "raw,kind,ok,failed,words",
    [
        ("0", EndingKind.EXITED, True, False, "exited with code 0"),
        ("137", EndingKind.EXITED, False, True, "exited with code 137 (SIGKILL)"),
        ("gone", EndingKind.SIGNALLED, False, True, "ended by a signal"),
        ("stopped", EndingKind.STOPPED, False, False, "stopped by ftwiz"),
        ("missing", EndingKind.MISSING, False, True, "never started"),
        ("aborted", EndingKind.ABORTED, False, True, "was not started"),
    ],
)
def test_node_ending_parsed_once(raw: str, kind: EndingKind, ok: bool, failed: bool, words: str) -> None:
    ending = NodeEnding.parse(raw)
    assert (ending.kind, ending.ok, ending.failed) == (kind, ok, failed)
    assert words in ending.describe()


def test_the_backend_ending_every_node_is_a_failure_with_its_reason_before_lost_links() -> None:
    sup = new()
    hear_all(sup, 2.0)
    sup.lost("a")  # the job steps died with the job: the streams broke before the watcher's word came
    sup.lost("b")
    sup.allocation_ended("Slurm ended job 7: TIMEOUT")
    sup.allocation_ended("a later word does not replace the first")
    decision = sup.decide(3.0)
    assert isinstance(decision, StopAll) and decision.status is RunStatus.FAILED
    assert decision.reason == "Slurm ended job 7: TIMEOUT" and not decision.unreachable


def test_the_operators_stop_wins_over_the_backends_end() -> None:
    sup = new()
    sup.request_stop("stopped by the operator (SIGINT)")
    sup.allocation_ended("Slurm ended job 7: CANCELLED")
    decision = sup.decide(1.0)
    assert isinstance(decision, StopAll) and decision.status is RunStatus.STOPPED
