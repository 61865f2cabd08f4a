"""The state every part of a run shares: record, runners, observers, and the runner messages' dispatch.

:class:`RunCore` holds what the launch (:mod:`tui.launch.launching`), the supervision loop
(:mod:`tui.launch.run`), the stop sequence (:mod:`tui.launch.stopping`) and attach/stop of a
detached run (:mod:`tui.launch.detached`) work on. Runner messages (:mod:`tui.launch.messages`)
are applied here, on the supervising thread: log lines to the record, the failure tracker and the
progress model; endings, losses and process samples to the decision core
(:class:`tui.launch.supervisor.Supervisor`).
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Optional

from shared.codepaths import CodePathMap
from shared.config import FtwizConfig
from shared.logprefix import node_line, split_rank
from shared.protocol import Checkpoint, Done, Error, Note, Started
from shared.redact import redact, secret_values
from tui.launch.events import (
    Event,
    LogLine,
    NodeStateChanged,
    Observer,
    ProgressChanged,
    RunFinished,
    RunNodeState,
    RunNote,
    RunResult,
)
from tui.launch.failure import FailureTracker
from tui.launch.messages import (
    AllocationEnded,
    BackendNote,
    NodeEnded,
    NodeLine,
    NodeLost,
    NodePgid,
    RankSamples,
    RunnerMessage,
)
from tui.launch.options import RunOptions
from tui.launch.plan import NodePlan
from tui.launch.progress import ProgressModel, ProgressSnapshot, parse_protocol
from tui.launch.runner import NodeRunner
from tui.launch.supervisor import Supervisor, Timing, WorkerFailure
from tui.launch.support import explain
from tui.launch.trainer_output import BarCollapser
from tui.runs.record import RunRecord
from tui.runs.status import RunStatus

__all__ = ["RunCore"]


class RunCore:
    """Shared state and plumbing of one run (see the module docstring)."""

    def __init__(
        self,
        config: FtwizConfig,
        record: RunRecord,
        *,
        options: RunOptions,
        reports: Optional[Mapping[str, Any]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.record = record
        self.run_id = record.model.run_id
        self.options = options
        self.reports = dict(reports or {})
        #: The clock every decision reads (the runners stamp ``last_rx`` with it too).
        self.clock = clock
        # [job] progress_total: a total for a loop that prints none (the ETA needs one); a printed total wins.
        self.progress = ProgressModel(snapshot=ProgressSnapshot(total_steps=config.job.progress_total))
        self.plans: dict[str, NodePlan] = {}
        self._outbox: "queue.Queue[RunnerMessage]" = queue.Queue()
        self._observers: list[Observer] = []
        self._observer_lock = threading.Lock()
        self.runners: dict[str, NodeRunner] = {}
        self.abandon_reap = False
        #: Nodes whose kill found another ftwiz's stop marker there first (``ftwiz --stop`` raced our own stop).
        self.stopped_first_on: list[str] = []
        self._finished: Optional[RunResult] = None
        self.failures = FailureTracker(n.name for n in config.nodes)
        self._node_state: dict[str, RunNodeState] = {}
        self._bars = BarCollapser()
        #: ``[job].env`` / ``[nccl].env`` secrets: masked in every line the run logs, keeps or shows.
        self._secrets = secret_values(config.job.env, config.nccl.env)
        self._code_map: Optional[tuple[tuple[Optional[str], ...], CodePathMap]] = None
        job = config.job
        self.supervisor = Supervisor.over(
            (n.name for n in config.nodes),
            Timing(
                unreachable_after_s=options.unreachable_after_s or max(4.0, 3 * config.cluster.ssh_keepalive_s),
                tick_s=options.tick_s,
                reattach_for_s=options.reattach_for_s,
                reconnect_s=options.reap_connect_timeout_s,
                stall_timeout_s=job.stall_timeout_s,
                first_step_grace_s=job.first_step_grace_s,
            ),
        )
        # One record of when each rank last moved: the progress model writes it, the supervisor reads it.
        self.supervisor.last_moved = self.progress.last_moved

    # ------------------------------------------------------------------ observers

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(event)`` for every event from now on; returns the unsubscribe function."""
        with self._observer_lock:
            self._observers.append(observer)

        def unsubscribe() -> None:
            with self._observer_lock:
                if observer in self._observers:
                    self._observers.remove(observer)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        with self._observer_lock:
            observers = list(self._observers)
        for observer in observers:
            try:
                observer(event)
            except Exception as exc:  # a broken observer must not take supervision down
                print(f"ftwiz: an event observer failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    def note(self, text: str, level: str = "info") -> None:
        text = redact(text, self._secrets)
        self.record.note(text, level)
        self._emit(RunNote(text, level))

    def set_state(self, node: str, state: RunNodeState, detail: str = "") -> None:
        if self._node_state.get(node) == state and not detail:
            return
        self._node_state[node] = state
        self.record.update_node(node, save=False, state=state.value)
        self._emit(NodeStateChanged(node, state, detail))

    # ------------------------------------------------------------------ control (any thread)

    def request_stop(self, reason: str = "stopped by the user") -> None:
        """Ask the supervisor to stop every node (Ctrl-C, SIGTERM, the TUI's stop button)."""
        if self.supervisor.stop_reason is not None:
            self.abandon_reap = True  # asked twice: stop waiting for unreachable nodes
        self.progress.settled = True  # before any rank is signalled (a bool: safe from any thread)
        self.supervisor.request_stop(reason)

    def post(self, message: RunnerMessage) -> None:
        """Hand the supervising thread a message from another thread (a backend's watcher)."""
        self._outbox.put(message)

    def detach(self) -> None:
        """Stop supervising and leave the run going (the terminal closed, the TUI quit)."""
        self.supervisor.request_detach()

    @property
    def node_states(self) -> dict[str, RunNodeState]:
        """Each node's current state (for a UI that subscribes late)."""
        return dict(self._node_state)

    @property
    def result(self) -> Optional[RunResult]:
        """The result once the run finished (None before)."""
        return self._finished

    # ------------------------------------------------------------------ runner messages

    def pump(self, timeout: float) -> None:
        """Apply what the runners posted (waiting at most ``timeout`` for the first message)."""
        try:
            message = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._apply(message)
            try:
                message = self._outbox.get_nowait()
            except queue.Empty:
                return

    def _apply(self, message: RunnerMessage) -> None:
        if isinstance(message, NodeLine):
            self._on_line(message.node, message.text)
        elif isinstance(message, RankSamples):
            self.supervisor.sampled(message.node, message.samples, self.clock())
            if self.progress.sampled(message.node, message.samples, self.clock()):  # your own code's straggler
                self._emit(ProgressChanged(self.progress.snapshot))
                self.record.update(straggler=self.progress.snapshot.straggler)
        elif isinstance(message, NodePgid):
            self.record.update_node(message.node, pgid=message.pgid, pgid_start=message.started)
        elif isinstance(message, NodeEnded):
            ending = message.ending
            self.progress.settled = True
            self.supervisor.ended(message.node, ending)
            self.record.update_node(message.node, exit=ending.raw, exit_description=ending.describe(), ended_at=time.time())
            state = RunNodeState.EXITED if ending.ok else RunNodeState.STOPPED if not ending.failed else RunNodeState.FAILED
            self.set_state(message.node, state, ending.describe())
        elif isinstance(message, NodeLost):
            self.set_state(message.node, RunNodeState.RECONNECTING, message.reason)
        elif isinstance(message, BackendNote):
            self.note(message.text, message.level)
        elif isinstance(message, AllocationEnded):
            self.supervisor.allocation_ended(message.reason)

    def _on_line(self, node: str, raw: str) -> None:
        rank, text = split_rank(redact(raw, self._secrets))
        prefix = f"{node}/{'-' if rank is None else rank}"
        for line in self._bars.feed(prefix, node_line(node, rank, text), text):  # a tqdm bar: one line per bar, not per update
            self.record.log(node, line)  # the log keeps what the node said; what is shown names the user's files
        text = self._code_paths().map(text)
        shown = node_line(node, rank, text)
        record = parse_protocol(text)
        # Protocol chatter (heartbeats, progress) would push the useful lines out of the tail.
        pid_ranks = {i.pid: r for r, i in self.progress.ranks.items() if i.pid is not None and i.node == node}
        chatter = record is not None and not isinstance(record, (Error, Note))
        failure = self.failures.observe(node, rank, text, shown, chatter=chatter, pid_ranks=pid_ranks)
        if failure is not None:
            self.progress.settled = True
            self.supervisor.worker_failed(WorkerFailure(failure["node"], failure["rank"], failure["local_rank"], failure["exitcode"]))
        if record is not None:
            if self.progress.update(node, rank, record, now=self.clock()):
                self._emit(ProgressChanged(self.progress.snapshot))
                if self.progress.snapshot.straggler != self.record.model.straggler:
                    self.record.update(straggler=self.progress.snapshot.straggler)
            said_rank = record.rank if record.rank is not None else rank
            if isinstance(record, Error):
                self.supervisor.rank_errored(node, said_rank, record.message or "", self.clock())
            elif isinstance(record, Started):
                if said_rank is not None:
                    self.supervisor.rank_reached(said_rank)
                    if record.balance is not None:  # your own code's rank read its share: its global rank is known now
                        self._balance_rank(node, record.local_rank, said_rank)
                self._save_ranks()
            elif isinstance(record, (Checkpoint, Done)):
                if isinstance(record, Done) and record.throughput is not None:
                    self.record.update(throughput=record.throughput, save=False)
                self.record.update(progress=dataclasses.asdict(self.progress.snapshot))
            elif isinstance(record, Note) and record.balance is not None:
                self.record.update(balance=record.balance)
        self._emit(LogLine(node, rank, text, time.time(), record))

    def _code_paths(self) -> CodePathMap:
        """Paths into the shipped code on the nodes → the user's ``code_dir`` (rebuilt when a node's run dir is known)."""
        rundirs = tuple(n.rundir for n in self.record.model.nodes.values())
        if self._code_map is None or self._code_map[0] != rundirs:
            code = (self.record.model.model_extra or {}).get("code") or {}
            self._code_map = (rundirs, CodePathMap.for_run(rundirs, code.get("root") if isinstance(code, dict) else None))
        return self._code_map[1]

    def _balance_rank(self, node: str, local_rank: Any, rank: int) -> None:
        """Name the global rank of ``node``'s ``local_rank`` in ``run.json``'s ``balance.ranks`` (planned before launch)."""
        balance = self.record.model.balance
        if not isinstance(balance, dict):
            return
        ranks = [dict(r, rank=rank) if r.get("node") == node and r.get("local_rank") == local_rank else r for r in balance.get("ranks", [])]
        self.record.update(balance={**balance, "ranks": ranks}, save=False)

    def _save_ranks(self) -> None:
        self.record.update(
            ranks={str(r): dataclasses.asdict(i) for r, i in sorted(self.progress.ranks.items())},
            world_size=self.progress.snapshot.world_size,
        )

    # ------------------------------------------------------------------ runners

    def new_runner(self, name: str) -> NodeRunner:
        node = next(n for n in self.config.nodes if n.name == name)
        transport = {"link_factory": self.options.link_factory} if self.options.link_factory is not None else {}
        runner = NodeRunner(node, self.config.cluster, self.run_id, self._outbox, tick_s=self.options.tick_s, clock=self.clock, **transport).start()
        self.runners[name] = runner
        return runner

    def collect(self, futures: Mapping[str, Future], timeout: float) -> dict[str, str]:
        problems: dict[str, str] = {}
        deadline = self.clock() + timeout
        for name, future in futures.items():
            try:
                future.result(timeout=max(0.1, deadline - self.clock()))
            except Exception as exc:
                problems[name] = explain(exc)
                self.set_state(name, RunNodeState.FAILED, problems[name])
        return problems

    def close_runners(self) -> None:
        for runner in self.runners.values():
            runner.close()
        deadline = self.clock() + 5.0  # a runner stuck on a dead link is a daemon thread: let it go
        for runner in self.runners.values():
            runner.join(max(0.0, deadline - self.clock()))

    # ------------------------------------------------------------------ the end

    def _diagnose(self) -> None:
        """The failure doctor: ``diagnoses`` in run.json, the first one as a note (printed at the end)."""
        from tui.doctor.hook import diagnose_finished_run

        diagnoses, versions, first = diagnose_finished_run(self.record.dir, self.record.data, self.config, self.reports)
        self.record.update(diagnoses=diagnoses, versions=versions, save=False)
        if first:
            self.note(first, "error")

    def finish(self, result: RunResult, *, save: bool = True) -> RunResult:
        """Record ``result`` (unless ``save`` is false: a record that must stay as it was), close, tell."""
        self._finished = result
        for line in self._bars.flush():  # held tqdm updates go to their node's log ("node/rank | ...")
            self.record.log(line.split("/", 1)[0], line)
        failed = None
        if result.failed_node is not None or result.failed_rank is not None:
            failed = {"node": result.failed_node, "rank": result.failed_rank, "last_lines": result.last_lines}
        if save:
            detached = result.status == RunStatus.DETACHED
            self.record.update(
                status=RunStatus(result.status),
                exit_code=result.exit_code,
                reason=result.reason,
                failed=failed,
                leftovers=result.leftovers,
                unreaped=result.unreaped,
                ended_at=None if detached else time.time(),
                detached_at=time.time() if detached else None,
                progress=dataclasses.asdict(self.progress.snapshot),
                straggler=self.progress.snapshot.straggler,
                root_causes=self.failures.root_causes,
                save=False,
            )
            if self.progress.ranks:
                self._save_ranks()
            if result.status == RunStatus.FAILED:
                self._diagnose()
            self.record.save()
        self.close_runners()
        self.record.close()
        self._emit(RunFinished(result))
        return result
