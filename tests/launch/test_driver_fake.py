"""The launch driver end to end against a fake transport (``tests/launch/fakelink.py``), in milliseconds.

Stop, attach, detach, stall, lost-link and failure sequences of :class:`tui.launch.run.Run` with its real
runners, record and supervisor, but scripted nodes behind ``RunOptions.link_factory`` and a virtual clock:
what is stopped where and in which order, what ``run.json`` says, the exit code. What only real processes
show (torchrun's own behaviour, sshd, signals reaching workers) stays in the namespace-cluster tests.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from shared.config import FtwizConfig, JobConfig, NodeConfig
from tests.launch.fakelink import FakeCluster
from tui.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_STOPPED
from tui.launch.events import Event, LogLine, RunNodeState, NodeStateChanged, RunNote, RunResult
from tui.launch.options import LaunchError, RunOptions
from tui.launch.run import Run
from tui.runs.status import RunStatus

NODES = ["a", "b"]
STALL_S = 60.0
UNREACHABLE_S = 4.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(tmp_path: Path) -> FtwizConfig:
    port = _closed_port()  # the agents' port: nothing listens, so the agent fallback of a stop fails at once
    token = tmp_path / "agent.token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    config = FtwizConfig(
        nodes=[NodeConfig(name=n, host="127.0.0.1", workdir=f"/w/{n}") for n in NODES],
        job=JobConfig(workload="allreduce", stall_timeout_s=STALL_S, first_step_grace_s=10 * STALL_S),
    )
    config.cluster.agent_port = port
    config.cluster.agent_token_file = str(token)
    return config


class Driven:
    """A :class:`Run` over fake nodes: launched (or attached), supervised in a thread, every event kept."""

    def __init__(self, tmp_path: Path, fake: Optional[FakeCluster] = None, **options: Any) -> None:
        self.fake = fake or FakeCluster(NODES)
        self.config = _config(tmp_path)
        defaults: dict[str, Any] = {
            "link_factory": self.fake.link, "runs_dir": tmp_path / "runs", "tick_s": 1.0, "stop_grace_s": 0.0,
            "unreachable_after_s": UNREACHABLE_S, "reap_connect_timeout_s": 2.0, "reap_for_s": 10.0, "dump_wait_s": 0.0,
            "reattach_for_s": 30.0,
        }
        self.options = RunOptions(**{**defaults, **options})
        self.events: list[Event] = []
        self.result: Optional[RunResult] = None
        self._thread: Optional[threading.Thread] = None
        self.run: Optional[Run] = None

    def _observe(self, event: Event) -> None:
        with self.fake.cond:
            self.events.append(event)
            self.fake.cond.notify_all()

    def launch(self) -> Run:
        run = Run(self.config, options=self.options, network_env={}, clock=self.fake.clock)
        self.fake.run_id = run.run_id
        run.subscribe(self._observe)
        run.launch()
        return self._supervise(run)

    def attach(self, run_id: str) -> Run:
        run = Run.attach(self.config, run_id, options=self.options)
        run.subscribe(self._observe)
        return self._supervise(run)

    def _supervise(self, run: Run) -> Run:
        self.run, self.result = run, None

        def supervise() -> None:
            result = run.supervise()
            with self.fake.cond:
                self.result = result
                self.fake.cond.notify_all()

        self._thread = threading.Thread(target=supervise, daemon=True, name="driver")
        self._thread.start()
        return run

    def finished(self) -> RunResult:
        self.fake.wait(lambda: self.result is not None, "the run to finish")
        assert self._thread is not None
        self._thread.join(10)
        assert self.result is not None
        return self.result

    def finished_as_time_passes(self, step: float) -> RunResult:
        """Advance the clock by ``step`` at a time until the run ends (the reap loop retries on the clock).

        Each step waits, briefly, for the driver to act on it; a step it slept through only moves time on
        sooner, so the outcome never depends on how fast this machine is.
        """
        fake = self.fake
        asked = 0

        def acted() -> bool:
            return self.result is not None or len(fake.calls) > asked

        for _ in range(1000):
            with fake.cond:
                if self.result is not None:
                    return self.finished()
                asked = len(fake.calls)
            fake.clock.advance(step)
            with fake.cond:
                fake.cond.wait_for(acted, 0.5)
        raise AssertionError("the run did not end as time passed")

    def wait_event(self, match: Callable[[Event], bool], what: str) -> None:
        self.fake.wait(lambda: any(match(e) for e in self.events), what)

    def state_seen(self, node: str, state: RunNodeState) -> Callable[[Event], bool]:
        return lambda e: isinstance(e, NodeStateChanged) and e.node == node and e.state is state

    def record(self) -> dict[str, Any]:
        assert self.run is not None
        return json.loads((self.run.record.dir / "run.json").read_text())

    def node_log(self, node: str) -> list[str]:
        assert self.run is not None
        path = self.run.record.dir / f"{node}.log"
        return path.read_text().splitlines() if path.exists() else []

    def notes(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, RunNote)]


def _running(d: Driven) -> None:
    """Every rank said it started and made its first step (so the first-step grace is over)."""
    for node in d.fake.nodes.values():
        for rank in node.ranks:
            node.emit("started", rank, local_rank=0, world_size=len(NODES))
            node.emit("progress", rank, step=1, total_steps=10, loss=2.0)
    d.fake.wait(lambda: sum(isinstance(e, LogLine) for e in d.events) >= 2 * len(NODES), "the first steps")


# ------------------------------------------------------------------------------------------- endings


def test_every_node_exits_0_the_run_succeeds_and_nothing_is_stopped(tmp_path):
    d = Driven(tmp_path)
    d.launch()
    _running(d)
    d.fake.nodes["a"].say("hello from a", rank=0)
    d.fake.nodes["a"].exit(0)
    d.fake.nodes["b"].exit(0)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, EXIT_OK)
    for node in NODES:
        assert d.fake.verbs(node) == ["connect", "launch", "upload", "go"], "a run that succeeds is never killed"
        assert f"{node}.sh" in (d.fake.nodes[node].files or {}), "the job files travelled in the launch exchange"
    stored = d.record()
    assert stored["status"] == "succeeded" and stored["exit_code"] == EXIT_OK
    assert {n: stored["nodes"][n]["pgid"] for n in NODES} == {"a": 1000, "b": 2000}
    assert {n: stored["nodes"][n]["state"] for n in NODES} == {"a": "exited", "b": "exited"}
    assert "a/0 | hello from a" in d.node_log("a")


def test_a_node_that_fails_stops_every_node_and_is_blamed(tmp_path):
    d = Driven(tmp_path)
    d.launch()
    _running(d)
    b = d.fake.nodes["b"]
    b.say("RuntimeError: boom", rank=1)
    b.exit(1)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.FAILED, EXIT_FAILED)
    assert result.reason == "torchrun on b exited with code 1"
    assert result.failed_node == "b"
    assert any("boom" in line for line in result.last_lines)
    # The node still running is stopped through its process group; the failed one is swept for leftovers.
    kill_a = [c for c in d.fake.calls if c[:2] == ("a", "kill")]
    assert len(kill_a) == 1 and kill_a[0][2:4] == (d.fake.run_id, "a")
    assert "1000" in kill_a[0][4:] and "4242" in kill_a[0][4:], "the group goes with its leader's start time"
    assert d.fake.verbs("b")[-1] == "kill"
    stored = d.record()
    assert stored["status"] == "failed" and stored["exit_code"] == EXIT_FAILED
    assert stored["failed"]["node"] == "b"
    assert stored["nodes"]["a"]["killed"] == [{"pid": 1001, "rank": 0, "signal": "SIGTERM"}]
    assert stored["nodes"]["b"]["exit"] == "1" and stored["nodes"]["a"]["state"] == "stopped"


def test_a_stop_request_stops_every_node_and_blames_nobody(tmp_path):
    d = Driven(tmp_path)
    run = d.launch()
    _running(d)
    run.request_stop("stopped by the user")
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.STOPPED, EXIT_STOPPED)
    assert result.failed_node is None and result.failed_rank is None
    assert all(d.fake.verbs(n)[-1] == "kill" for n in NODES)
    stored = d.record()
    assert stored["status"] == "stopped" and stored["stop_reason"] == "stopped by the user" and stored["failed"] is None
    assert {n: stored["nodes"][n]["exit"] for n in NODES} == {"a": "stopped", "b": "stopped"}


def test_a_failure_that_an_outside_stop_caused_is_a_stop_not_a_failure(tmp_path):
    """`ftwiz --stop` from another terminal signals node a first; a's ranks die and b's rank fails on the lost
    peer before a's stream says "stopped". Our own stop then finds --stop's marker on a (left before any signal):
    the run was stopped, nobody is blamed, nothing is diagnosed (CI: test_detach_then_attach_then_stop)."""
    d = Driven(tmp_path)
    d.launch()
    _running(d)
    d.fake.nodes["a"].stopped_before = True
    b = d.fake.nodes["b"]
    b.say("RuntimeError: Connection closed by peer [10.0.0.1]:29500", rank=1)
    b.exit(1)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.STOPPED, EXIT_STOPPED)
    assert result.failed_node is None and result.failed_rank is None
    assert result.reason.startswith("stopped from another ftwiz (ftwiz --stop) on a;"), result.reason
    stored = d.record()
    assert stored["status"] == "stopped" and stored["failed"] is None and not stored.get("diagnoses")
    assert stored["stop_reason"] == result.reason


def test_a_stop_before_go_starts_nothing_anywhere(tmp_path):
    d = Driven(tmp_path)
    run = Run(d.config, options=d.options, network_env={}, clock=d.fake.clock, start_not_before=4e9)
    d.fake.run_id = run.run_id
    d.run = run
    threading.Timer(0.0, run.request_stop, args=("changed my mind",)).start()
    with pytest.raises(LaunchError, match="not started: changed my mind"):
        run.launch()
    for node in NODES:
        assert "go" not in d.fake.verbs(node) and "kill" not in d.fake.verbs(node)
    assert d.record()["status"] == "launch_failed"


def test_a_node_that_cannot_be_prepared_fails_the_launch_before_any_go(tmp_path):
    d = Driven(tmp_path)
    d.fake.nodes["b"].reachable = False
    with pytest.raises(LaunchError) as caught:
        d.launch()
    assert set(caught.value.problems) == {"b"} and "connection refused" in caught.value.problems["b"]
    assert "go" not in d.fake.verbs("a"), "nothing starts anywhere unless every node is ready"
    stored = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert stored["status"] == "launch_failed" and stored["exit_code"] == EXIT_FAILED


# ------------------------------------------------------------------------------------------- stall


def test_a_stall_dumps_every_stack_before_stopping_and_names_the_ranks(tmp_path):
    d = Driven(tmp_path)
    d.launch()
    _running(d)
    d.fake.clock.advance(STALL_S + 1)  # every node still ticks: they answer, nobody moves
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.FAILED, EXIT_FAILED)
    assert result.reason.startswith("stall: rank(s) 0, 1 made no progress for 60 s")
    assert result.stalled_ranks == [0, 1]
    for node in NODES:
        verbs = d.fake.verbs(node)
        assert verbs.index("dump") < verbs.index("kill"), f"{node}: stacks are dumped before the stop"
    stored = d.record()
    assert stored["stalled_ranks"] == [0, 1] and stored["hang"]["before_first_step"] is False
    assert stored["stack_dump_silent"] == [0, 1], "the fake ranks print no stack: named as silent"


# ------------------------------------------------------------------------------------------- links


@pytest.mark.parametrize("answers_again", [False, True], ids=["never-answers", "answers-again"])
def test_one_node_silent_while_the_other_answers_stops_the_run_and_reaps_it(tmp_path, answers_again):
    d = Driven(tmp_path, reap_for_s=6.0)
    d.launch()
    _running(d)
    b = d.fake.nodes["b"]
    b.connect_cost_s = 2.0  # a black-holed node: every connect attempt times out
    b.cut()
    d.wait_event(lambda e: isinstance(e, RunNote) and e.text.startswith("waiting up to 6 s for b"), "the reap to start")
    assert d.fake.verbs("a")[-1] == "kill", "the node that answers is stopped before the unreachable one is waited for"
    if answers_again:
        b.restore()
    result = d.finished_as_time_passes(1.0)
    assert (result.status, result.exit_code) == (RunStatus.FAILED, EXIT_FAILED)
    assert result.reason.startswith("b stopped answering") and result.failed_node == "b"
    refused = [c for c in d.fake.calls if c == ("b", "connect", "refused")]
    assert len(refused) >= 2, "reconnects while running (a silent node is given its window), then reap attempts"
    stored = d.record()
    if answers_again:
        assert result.unreaped == [] and stored["unreaped"] == []
        assert d.fake.verbs("b")[-2:] == ["connect", "kill"] and stored["nodes"]["b"]["reaped_at"] is not None
        assert any(n.startswith("b answers again: reaped 1 leftover process(es) [2001]") for n in d.notes())
    else:
        assert result.unreaped == ["b"] and stored["unreaped"] == ["b"]
        assert "kill" not in d.fake.verbs("b") and stored["nodes"]["b"]["state"] == "unreachable"
        assert any("gave up waiting for b" in n for n in d.notes())


def test_every_node_silent_leaves_the_run_going_and_detaches(tmp_path):
    d = Driven(tmp_path, reattach_for_s=10.0)
    d.launch()
    _running(d)
    with d.fake.cond:  # both links drop at once: our side's network
        for node in d.fake.nodes.values():
            node.connect_cost_s = 2.0
            node.cut()
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.DETACHED, EXIT_FAILED)
    assert "lost contact with every node" in result.reason
    assert all("kill" not in d.fake.verbs(n) for n in NODES), "a run we cannot see is never stopped"
    assert d.record()["status"] == "detached"


def test_every_node_back_after_an_outage_resumes_from_the_log_offset(tmp_path):
    d = Driven(tmp_path)
    d.launch()
    _running(d)
    a = d.fake.nodes["a"]
    with d.fake.cond:
        for node in d.fake.nodes.values():
            node.connect_cost_s = 2.0
            node.cut()
    d.wait_event(lambda e: isinstance(e, RunNote) and "every node stopped answering" in e.text, "the outage note")
    a.say("said while we were away", rank=0)
    with d.fake.cond:
        for node in d.fake.nodes.values():
            node.restore()
    d.wait_event(lambda e: isinstance(e, RunNote) and "supervision resumed" in e.text, "the nodes back")
    for node in d.fake.nodes.values():
        node.exit(0)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, EXIT_OK)
    follows = [c for c in d.fake.calls if c[:2] == ("a", "follow")]
    assert follows and int(follows[-1][2]) > 0, "a re-attach resumes where the stream stopped"
    assert d.node_log("a").count("a/0 | said while we were away") == 1


# ------------------------------------------------------------------------------------------- detached runs


def test_detach_leaves_every_node_running_and_attach_replays_then_supervises(tmp_path):
    d = Driven(tmp_path)
    run = d.launch()
    _running(d)
    run.detach()
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.DETACHED, EXIT_OK)
    assert all("kill" not in d.fake.verbs(n) for n in NODES)
    assert d.record()["status"] == "detached"
    a = d.fake.nodes["a"]
    a.say("after the detach", rank=0)
    d.attach(run.run_id)
    assert sorted(c for c in d.fake.calls if c[1] == "follow") == [("a", "follow", "0"), ("b", "follow", "0")], \
        "an attach follows every node's log from its start"
    a.exit(0)
    d.fake.nodes["b"].exit(0)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, EXIT_OK)
    log = d.node_log("a")
    assert log.count("a/0 | after the detach") == 1 and sum("ftwiz" in line and "started" in line for line in log) == 1, \
        "the attach replays the node log once, from its start"
    stored = d.record()
    assert stored["status"] == "succeeded" and stored["attached_at"] is not None


def test_stop_detached_kills_where_it_can_and_names_the_node_it_could_not_reach(tmp_path):
    d = Driven(tmp_path)
    run = d.launch()
    _running(d)
    run.detach()
    d.finished()
    d.fake.nodes["b"].cut()
    result = Run.stop_detached(d.config, run.run_id, options=d.options)
    assert (result.status, result.exit_code) == (RunStatus.STOPPED, EXIT_FAILED)
    assert result.unreaped == ["b"] and "not reached: b" in result.reason
    kill_a = [c for c in d.fake.calls if c[:2] == ("a", "kill")]
    assert len(kill_a) == 1 and "1000" in kill_a[0][4:] and "4242" in kill_a[0][4:], "the stored group and start time"
    stored = d.record()
    assert stored["status"] == "stopped" and stored["nodes"]["a"]["killed"][0]["pid"] == 1001


def test_attach_to_an_unreachable_node_leaves_the_record_as_it_was(tmp_path):
    d = Driven(tmp_path)
    run = d.launch()
    _running(d)
    run.detach()
    d.finished()
    before = (run.record.dir / "run.json").read_bytes()
    d.fake.nodes["b"].cut()
    with pytest.raises(LaunchError, match="unchanged") as caught:
        Run.attach(d.config, run.run_id, options=d.options)
    assert set(caught.value.problems) == {"b"}
    assert (run.record.dir / "run.json").read_bytes() == before
