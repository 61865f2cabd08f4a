"""A supervised run: start torchrun on every node, stream, watch, and stop everything on any failure.

Use from code (the TUI does the same from a ``@work(thread=True)`` worker)::

    run = Run(config, reports=reports)           # reports: agent NodeReports (GPU counts, cores, NICs)
    unsubscribe = run.subscribe(on_event)       # LogLine, ProgressChanged, NodeStateChanged, RunNote, RunFinished
    run.launch()                                 # raises LaunchError; nothing is left running then
    result = run.supervise()                     # blocks until the job ends, is stopped or detached
    # from any thread: run.request_stop("why"), run.detach()

    run = Run.attach(config, run_id)             # a detached run: replay the node logs, supervise again
    Run.stop_detached(config, run_id)            # stop it everywhere without supervising

Stop-all triggers: a node's torchrun ends non-zero; a node goes silent (no bytes, not even the
node helper's once-a-second tick, for ``unreachable_after_s``) while another still answers; a stall
(no progress or heartbeat for ``job.stall_timeout_s``, ``job.first_step_grace_s`` before the first
one), which first sends SIGUSR1 to every rank for stack dumps; and :meth:`Run.request_stop`. The
sequence: TERM to each node's process group and every process tagged with the run → grace → KILL →
verify. A node that did not answer is reaped when it answers again, for ``reap_for_s``. When *every*
node goes silent at once, the operator's own network is the likely cause: the run is left alone
and re-attached when the nodes answer again.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from shared.config import FtwizConfig, NodeConfig
from tui.launch.events import (
    Event,
    LogLine,
    NodeState,
    NodeStateChanged,
    Observer,
    ProgressChanged,
    RunFinished,
    RunNote,
    RunResult,
)
from tui.launch.failure import FailureTracker, describe_exit, describe_worker_exit
from tui.launch.nodefiles import node_files
from tui.launch.plan import NodePlan
from tui.launch.progress import ProgressModel, parse_protocol, split_rank
from tui.launch.record import RunRecord, load_record, new_run_id, runs_dir
from tui.launch.runner import NodeRunner
from tui.launch.support import agent_stop, explain, plan_network, workload_files

__all__ = ["LaunchError", "Run", "RunOptions"]

EXIT_OK, EXIT_FAILED, EXIT_STOPPED = 0, 1, 130
@dataclass
class RunOptions:
    """Supervision knobs (defaults suit real clusters; tests shorten some)."""

    stop_grace_s: float = 3.0
    """Seconds between SIGTERM and SIGKILL."""
    unreachable_after_s: Optional[float] = None
    """Silence after which a node counts as unreachable; default 3 × ``ssh_keepalive_s`` (at least 4 s)."""
    reap_for_s: float = 120.0
    """How long to keep trying to reap an unreachable node's processes after a stop."""
    reap_connect_timeout_s: float = 5.0
    """SSH connect timeout of each reap attempt."""
    dump_wait_s: float = 2.0
    """Seconds to collect stack dumps after SIGUSR1 before a stall stop."""
    tick_s: float = 1.0
    """How often the node helper sends a liveness tick."""
    reattach_for_s: float = 600.0
    """When every node went silent at once: how long to keep trying to re-attach before detaching."""
    last_lines: int = 20
    """Log lines kept for the failure report."""
    runs_dir: Optional[Path] = None
    """Where ``runs/<run id>`` goes; default ``$FTWIZ_RUNS_DIR`` or ``./runs``."""


class LaunchError(Exception):
    """The run could not start; nothing was left running. ``problems`` maps node → message (with hint)."""

    def __init__(self, message: str, problems: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = dict(problems or {})

    def __str__(self) -> str:
        lines = [self.message] + [f"  {node}: {text}" for node, text in self.problems.items()]
        return "\n".join(lines)


class Run:
    """One run on every node of ``config`` (see the module docstring)."""

    def __init__(
        self,
        config: FtwizConfig,
        *,
        run_id: Optional[str] = None,
        options: Optional[RunOptions] = None,
        reports: Optional[Mapping[str, Any]] = None,
        network_env: Optional[Mapping[str, Mapping[str, str]]] = None,
        resume: bool = False,
        output_dir: Optional[str] = None,
        resumed_from: Optional[str] = None,
        config_source: Optional[str] = None,
        start_not_before: Optional[float] = None,
    ) -> None:
        self.config = config
        self.run_id = run_id or new_run_id()
        self.options = options or RunOptions()
        self.reports = dict(reports or {})
        self.network_env = network_env if network_env is not None else plan_network(config, self.reports)
        self.resume = resume
        self.output_dir = output_dir or config.job.output_dir
        #: Unix time before which torchrun must not start (the checklist's test listener still holds
        #: the rendezvous port on the master until then); the nodes are prepared meanwhile.
        self.start_not_before = start_not_before
        self.progress = ProgressModel()
        self.record = RunRecord(runs_dir(self.options.runs_dir), self.run_id)
        self.plans: dict[str, NodePlan] = {}
        self._outbox: "queue.Queue[tuple[str, str, Any]]" = queue.Queue()
        self._observers: list[Observer] = []
        self._observer_lock = threading.Lock()
        self._runners: dict[str, NodeRunner] = {}
        self._stop_request: Optional[str] = None
        self._detach_request = False
        self._abandon_reap = False
        self._finished: Optional[RunResult] = None
        self._started_at: Optional[float] = None
        self.failures = FailureTracker(n.name for n in config.nodes)
        self._exit_order: list[str] = []
        self._worker_failure: Optional[dict[str, Any]] = None
        self._node_state: dict[str, NodeState] = {}
        self.record.data.update(
            {
                "run_id": self.run_id,
                "cluster": config.cluster.name,
                "config": config.model_dump(mode="json"),
                "config_source": config_source,
                "status": "starting",
                "resume": resume,
                "resumed_from": resumed_from,
                "output_dir": self.output_dir,
                "nodes": {n.name: {"host": n.host} for n in config.nodes},
            }
        )
        self.record.save()

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

    def _note(self, text: str, level: str = "info") -> None:
        self.record.data.setdefault("notes", []).append({"time": time.time(), "level": level, "text": text})
        self._emit(RunNote(text, level))

    def _set_state(self, node: str, state: NodeState, detail: str = "") -> None:
        if self._node_state.get(node) == state and not detail:
            return
        self._node_state[node] = state
        self.record.data.setdefault("nodes", {}).setdefault(node, {})["state"] = state.value
        self._emit(NodeStateChanged(node, state, detail))

    # ------------------------------------------------------------------ control (any thread)

    def request_stop(self, reason: str = "stopped by the user") -> None:
        """Ask the supervisor to stop every node (Ctrl-C, SIGTERM, the TUI's stop button)."""
        if self._stop_request is not None:
            self._abandon_reap = True  # asked twice: stop waiting for unreachable nodes
        self._stop_request = reason

    def detach(self) -> None:
        """Stop supervising and leave the run going (the terminal closed, the TUI quit)."""
        self._detach_request = True

    @property
    def node_states(self) -> dict[str, NodeState]:
        """Each node's current state (for a UI that subscribes late)."""
        return dict(self._node_state)

    @property
    def result(self) -> Optional[RunResult]:
        """The result once the run finished (None before)."""
        return self._finished

    # ------------------------------------------------------------------ launch

    def launch(self) -> None:
        """Connect to every node, copy the job, start torchrun everywhere.

        Raises :class:`LaunchError` naming each node that failed, with its fix; in that case nothing of
        this run is left running anywhere (nodes that had started are stopped again).
        """
        t0 = time.monotonic()
        self.record.update(launched_at=time.time())
        for node in self.config.nodes:
            runner = NodeRunner(node, self.config.cluster, self.run_id, self._outbox, tick_s=self.options.tick_s).start()
            self._runners[node.name] = runner
            self._set_state(node.name, NodeState.CONNECTING)
        try:
            package = workload_files()
        except RuntimeError as exc:
            self._close_runners()
            raise LaunchError(str(exc)) from None
        futures = {name: r.submit(lambda r=r: (r.connect(), r.prepare(lambda wd, rd, r=r: self._node_files(r.node, wd, rd, package)))) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=self.config.cluster.ssh_connect_timeout_s + 120)
        if problems:
            self._launch_failed("could not prepare every node; nothing was started", problems)
        t_prepared = time.monotonic()
        if self.start_not_before is not None and self.start_not_before > time.time():
            wait = self.start_not_before - time.time()
            self._note(f"waiting {wait:.1f} s for the checklist's test listener to free port {self.config.cluster.rendezvous_port} on the master")
            while time.time() < self.start_not_before and self._stop_request is None:
                time.sleep(0.1)
        if self._stop_request is not None:
            # Stopped before "go": closing the prepared execs starts nothing anywhere.
            self._launch_failed(f"not started: {self._stop_request}", {})
        for name in self._runners:
            self._set_state(name, NodeState.STARTING)
        futures = {name: r.submit(r.launch) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=60)
        if problems:
            self._note("a node failed to start: stopping the nodes that did", "error")
            self._kill_everywhere(list(self._runners.values()))
            self._launch_failed("torchrun did not start on every node; the others were stopped", problems)
        self._started_at = time.monotonic()
        for name, runner in self._runners.items():
            self._set_state(name, NodeState.RUNNING, f"pgid {runner.pgid}")
            self.record.data["nodes"][name].update(pgid=runner.pgid)
        self.record.update(
            status="running",
            started_at=time.time(),
            fanout_s=self._started_at - t0,
            prepare_s=t_prepared - t0,
        )
        self._note(f"run {self.run_id} started on {len(self._runners)} node(s) in {self._started_at - t0:.1f} s")

    def _node_files(self, node: NodeConfig, workdir_abs: str, rundir_abs: str, package: Mapping[str, bytes]) -> dict[str, bytes]:
        """Everything a node needs in its run directory (called on that node's runner thread)."""
        built = node_files(
            self.config, node, run_id=self.run_id, workdir_abs=workdir_abs, rundir_abs=rundir_abs, package=package,
            reports=self.reports, network_env=self.network_env, resume=self.resume, output_dir=self.output_dir,
        )
        self.plans[node.name] = built.plan
        self.record.update_node(node.name, **built.record)
        if built.run_record:
            self.record.update(**built.run_record)
        return built.files

    def _collect(self, futures: Mapping[str, Future], timeout: float) -> dict[str, str]:
        problems: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        for name, future in futures.items():
            try:
                future.result(timeout=max(0.1, deadline - time.monotonic()))
            except Exception as exc:
                problems[name] = explain(exc)
                self._set_state(name, NodeState.FAILED, problems[name])
        return problems

    def _launch_failed(self, message: str, problems: Mapping[str, str]) -> None:
        self._close_runners()
        details = "; ".join(f"{n}: {p}" for n, p in problems.items())
        result = RunResult(self.run_id, "launch_failed", EXIT_FAILED, reason=f"{message}: {details}" if details else message)
        self._finish(result)
        raise LaunchError(message, problems)

    def _close_runners(self) -> None:
        for runner in self._runners.values():
            runner.close()
        deadline = time.monotonic() + 5.0  # a runner stuck on a dead link is a daemon thread: let it go
        for runner in self._runners.values():
            runner.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ attach

    @classmethod
    def attach(cls, config: FtwizConfig, run_id: str, *, options: Optional[RunOptions] = None) -> "Run":
        """Reconnect to a detached run: replay every node's log from the start and supervise again.

        Raises :class:`LaunchError` when a node cannot be reached or holds no such run.
        """
        options = options or RunOptions()
        base = runs_dir(options.runs_dir)
        try:
            stored = load_record(base, run_id)
        except (OSError, ValueError):
            stored = {}
        run = cls(config, run_id=run_id, options=options, resume=bool(stored.get("resume")), output_dir=stored.get("output_dir"), resumed_from=stored.get("resumed_from"))
        # Keep what the launch recorded; the attach adds to it.
        run.record.data = _merge_record(stored, run.record.data, keep_status=False)
        run.record.data["attached_at"] = time.time()
        run._attach_nodes(stored.get("nodes") or {})
        return run

    def _attach_nodes(self, stored_nodes: Mapping[str, Mapping[str, Any]]) -> None:
        for node in self.config.nodes:
            runner = NodeRunner(node, self.config.cluster, self.run_id, self._outbox, tick_s=self.options.tick_s).start()
            runner.rundir_abs = (stored_nodes.get(node.name) or {}).get("rundir")
            self._runners[node.name] = runner
            self._set_state(node.name, NodeState.CONNECTING)
            # The node-side log is the full story: start the controller-side copy afresh.
            (self.record.dir / f"{node.name}.log").write_text("")

        def attach_one(r: NodeRunner) -> None:
            r.connect()
            if r.rundir_abs is None:
                r.locate()
            r.follow(0)

        futures = {name: r.submit(lambda r=r: attach_one(r)) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=self.config.cluster.ssh_connect_timeout_s + 60)
        if problems:
            self._close_runners()
            raise LaunchError(f"could not re-attach to run {self.run_id}", problems)
        self._started_at = time.monotonic()
        for name in self._runners:
            self._set_state(name, NodeState.RUNNING, "attached")
        self.record.update(status="running")
        self._note(f"attached to run {self.run_id} on {len(self._runners)} node(s); replaying the node logs")

    # ------------------------------------------------------------------ supervision

    def supervise(self) -> RunResult:
        """Stream, watch and stop; blocks until the run ends, is stopped or detached."""
        if self._finished is not None:
            return self._finished
        try:
            return self._supervise()
        except BaseException as exc:
            if self._finished is None:
                # Whatever broke the loop, the nodes must not be left running unsupervised.
                reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"supervisor error: {type(exc).__name__}: {exc}"
                self._stop_all(reason, status="stopped" if isinstance(exc, KeyboardInterrupt) else "failed")
            if isinstance(exc, KeyboardInterrupt):
                assert self._finished is not None
                return self._finished
            raise

    def _supervise(self) -> RunResult:
        opts = self.options
        unreachable_after = opts.unreachable_after_s or max(4.0, 3 * self.config.cluster.ssh_keepalive_s)
        offline_since: Optional[float] = None
        back_since: Optional[float] = None
        reconnects: dict[str, Future] = {}
        while True:
            self._pump(0.2)
            now = time.monotonic()
            if self._stop_request is not None:
                return self._stop_all(self._stop_request, status="stopped")
            if self._detach_request:
                return self._detached("detached: the run goes on without supervision")
            runners = list(self._runners.values())
            if any(r.exit == "stopped" for r in runners):
                # Another controller (``ftwiz --stop``, a TUI) stopped the run on purpose.
                return self._stop_all("stopped from another ftwiz (ftwiz --stop)", status="stopped")
            failed = [r for r in runners if r.exit not in (None, "0")]
            if failed:
                first = min(failed, key=lambda r: self._exit_order.index(r.name) if r.name in self._exit_order else 99)
                return self._stop_all(f"torchrun on {first.name} {describe_exit(first.exit)}", status="failed", trigger_node=first.name)
            if self._worker_failure is not None:
                # torchrun said a worker died: with --max-restarts=0 that node is going down; act now.
                f = self._worker_failure
                who = f"rank {f['rank']}" if f.get("rank") is not None else f"local rank {f['local_rank']}"
                return self._stop_all(f"{who} on {f['node']} {describe_worker_exit(f['exitcode'])}", status="failed", trigger_node=f["node"])
            active = [r for r in runners if r.exit is None]
            if not active:
                return self._succeeded()
            # Broken streams: try to reconnect quietly while the node still counts as answering.
            for r in active:
                pending = reconnects.get(r.name)
                if r.lost and (pending is None or pending.done()):
                    self._set_state(r.name, NodeState.RECONNECTING)
                    reconnects[r.name] = r.submit(lambda r=r: r.reconnect(timeout=opts.reap_connect_timeout_s))
            silent = [r for r in active if r.last_rx is None or now - r.last_rx > unreachable_after]
            if silent and len(silent) == len(active) and len(self._runners) > 0:
                if offline_since is None:
                    offline_since = now
                    self._note(
                        f"every node stopped answering at once: the network on this side is probably down. The run is "
                        f"left going; re-attaching as the nodes answer (up to {opts.reattach_for_s:.0f} s)",
                        "warn",
                    )
                    for r in active:
                        self._set_state(r.name, NodeState.RECONNECTING)
                for r in active:
                    pending = reconnects.get(r.name)
                    if pending is None or pending.done():
                        reconnects[r.name] = r.submit(lambda r=r: r.reconnect(timeout=opts.reap_connect_timeout_s))
                if now - offline_since > opts.reattach_for_s:
                    return self._detached(f"lost contact with every node for {opts.reattach_for_s:.0f} s; the run may still be going", exit_code=EXIT_FAILED)
                continue
            if offline_since is not None:
                # Coming back: give every node time to re-attach before calling a silent one dead.
                back_since = back_since or now
                if silent and now - back_since < unreachable_after + opts.reap_connect_timeout_s * 2:
                    for r in silent:
                        pending = reconnects.get(r.name)
                        if pending is None or pending.done():
                            reconnects[r.name] = r.submit(lambda r=r: r.reconnect(timeout=opts.reap_connect_timeout_s))
                    continue
                offline_since = back_since = None
                for rank in self.progress.last_moved:  # the silence was ours, not the ranks'
                    self.progress.last_moved[rank] = now
                self._note("every node answers again; supervision resumed")
                for r in active:
                    self._set_state(r.name, NodeState.RUNNING)
            # Ticks come once a second per node, each on its own phase: a node counts as answering only if
            # heard from within a few ticks, so an all-nodes drop is not mistaken for one node's.
            answering = [r for r in active if r not in silent and r.last_rx is not None and now - r.last_rx < 2.5 * opts.tick_s + 0.5]
            if silent and answering:
                node = silent[0]
                since = now - (node.last_rx or now)
                return self._stop_all(
                    f"{node.name} stopped answering (nothing for {since:.0f} s over SSH) while the other nodes still answer",
                    status="failed",
                    trigger_node=node.name,
                    unreachable=[r.name for r in silent],
                )
            if silent:
                continue  # the others went quiet too: this is likely our side's network; see next round
            stalled = self._stalled_ranks(now)
            if stalled is not None:
                return self._stall_stop(stalled)

    def _pump(self, timeout: float) -> None:
        """Handle what the runners posted (waiting at most ``timeout`` for the first item)."""
        try:
            item = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(*item)
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, kind: str, node: str, payload: Any) -> None:
        if kind == "line":
            self._on_line(node, payload)
        elif kind == "pgid":
            self.record.update_node(node, pgid=payload)
        elif kind == "exit":
            self._exit_order.append(node)
            self.record.update_node(node, exit=payload, exit_description=describe_exit(payload), ended_at=time.time())
            state = {"0": NodeState.EXITED, "stopped": NodeState.STOPPED}.get(payload, NodeState.FAILED)
            self._set_state(node, state, describe_exit(payload))
        elif kind == "lost":
            self._set_state(node, NodeState.RECONNECTING, str(payload))

    def _on_line(self, node: str, raw: str) -> None:
        rank, text = split_rank(raw)
        prefix = f"{node}/{'-' if rank is None else rank}"
        shown = f"{prefix} | {text}"
        self.record.log(node, shown)
        obj = parse_protocol(text)
        # Protocol chatter (heartbeats, progress) would push the useful lines out of the tail.
        pid_ranks = {i.pid: r for r, i in self.progress.ranks.items() if i.pid is not None and i.node == node}
        failure = self.failures.observe(node, rank, text, shown, chatter=obj is not None and obj.get("ftwiz") not in ("error", "note"), pid_ranks=pid_ranks)
        if failure is not None and self._worker_failure is None:
            self._worker_failure = failure
        if obj is not None:
            kind = obj.get("ftwiz")
            if self.progress.update(node, rank, obj):
                self._emit(ProgressChanged(self.progress.snapshot))
            if kind == "started":
                self.record.data["ranks"] = {str(r): dataclasses.asdict(i) for r, i in sorted(self.progress.ranks.items())}
                self.record.data["world_size"] = self.progress.snapshot.world_size
                self.record.save()
            elif kind in ("checkpoint", "done"):
                self.record.update(progress=dataclasses.asdict(self.progress.snapshot))
        self._emit(LogLine(node, rank, text, time.time()))

    # ------------------------------------------------------------------ stall

    def _stalled_ranks(self, now: float) -> Optional[list[int]]:
        """Ranks that did not move for too long, or None when all is well."""
        job = self.config.job
        assert self._started_at is not None
        moved = self.progress.last_moved
        if not moved:
            if now - self._started_at > job.first_step_grace_s:
                started = sorted(self.progress.ranks) or []
                return started
            return None
        if not any(now - t > job.stall_timeout_s for t in moved.values()):
            return None
        # The first rank past the timeout triggers; name every rank that has been still for a good
        # while too (a hang stops its peers within a step, so their silences differ by moments).
        return sorted(r for r, t in moved.items() if now - t > job.stall_timeout_s / 2)

    def _stall_stop(self, stalled: list[int]) -> RunResult:
        job = self.config.job
        first = not self.progress.last_moved
        window = job.first_step_grace_s if first else job.stall_timeout_s
        who = ", ".join(map(str, stalled)) if stalled else "every rank"
        self._note(f"stall: no progress or heartbeat from rank(s) {who} for {window:.0f} s; dumping every rank's stack (SIGUSR1)", "error")
        self.failures.reset_dumps()
        futures = {r.name: r.submit(lambda r=r: r.send_signal("SIGUSR1")) for r in self._runners.values() if r.exit is None}
        signalled: list[int] = []
        deadline = time.monotonic() + self.options.dump_wait_s
        while time.monotonic() < deadline:
            self._pump(0.1)
        for future in futures.values():
            try:
                signalled += [s["rank"] for s in future.result(timeout=5)["signalled"] if s.get("rank") is not None]
            except Exception:
                pass
        silent = sorted(set(signalled) - self.failures.dumped)
        if silent:
            self._note(f"rank(s) {', '.join(map(str, silent))} did not answer SIGUSR1 with a stack dump: stopped (SIGSTOP) or hung outside Python", "error")
        self.record.update(stalled_ranks=stalled, stack_dumps_from=sorted(self.failures.dumped), stack_dump_silent=silent)
        suspect = silent[0] if silent else (stalled[0] if stalled else None)
        return self._stop_all(
            f"stall: rank(s) {who} made no progress for {window:.0f} s (job.stall_timeout_s)",
            status="failed",
            trigger_rank=suspect,
            stalled=stalled,
        )

    # ------------------------------------------------------------------ stop

    def _kill_everywhere(self, runners: Sequence[NodeRunner]) -> tuple[dict[str, list[int]], list[str]]:
        """TERM → grace → KILL on each runner's node in parallel; returns (leftovers, nodes that did not answer)."""
        grace = self.options.stop_grace_s
        futures = {r.name: r.submit(lambda r=r: r.kill(grace)) for r in runners}
        leftovers: dict[str, list[int]] = {}
        failed: list[str] = []
        deadline = time.monotonic() + grace + 25
        pending = dict(futures)
        while pending and time.monotonic() < deadline:
            self._pump(0.1)
            for name, future in list(pending.items()):
                if not future.done():
                    continue
                del pending[name]
                try:
                    report = future.result()
                except Exception as exc:
                    failed.append(name)
                    self._note(f"{name}: could not stop over SSH ({explain(exc)}); will retry", "warn")
                    continue
                self._record_kill(name, report)
                if report.get("remaining"):
                    leftovers[name] = report["remaining"]
        failed += list(pending)
        return leftovers, failed

    def _record_kill(self, node: str, report: Mapping[str, Any]) -> None:
        killed = report.get("killed") or []
        self.record.update_node(node, killed=killed, remaining=report.get("remaining") or [])
        by_kill = sum(1 for k in killed if k.get("signal") == "SIGKILL")
        if report.get("remaining"):
            self._note(f"{node}: processes still there after SIGKILL: {report['remaining']}", "error")
            self._set_state(node, NodeState.FAILED, f"leftovers {report['remaining']}")
        else:
            detail = f"{len(killed)} process(es) stopped" + (f", {by_kill} needed SIGKILL" if by_kill else "") if killed else "nothing left running"
            self._set_state(node, NodeState.STOPPED, detail)

    def _stop_all(
        self,
        reason: str,
        *,
        status: str,
        trigger_node: Optional[str] = None,
        trigger_rank: Optional[int] = None,
        unreachable: Sequence[str] = (),
        stalled: Sequence[int] = (),
    ) -> RunResult:
        stop_started = time.monotonic()
        self._note(f"stopping every node: {reason}", "error" if status == "failed" else "warn")
        self.record.update(status="stopping", stop_reason=reason, stop_requested_at=time.time())
        reachable = [r for r in self._runners.values() if r.name not in unreachable]
        for r in reachable:
            self._set_state(r.name, NodeState.STOPPING)
        for name in unreachable:
            self._set_state(name, NodeState.UNREACHABLE, "will be reaped when it answers")
        leftovers, failed = self._kill_everywhere(reachable)
        to_reap = list(unreachable) + failed
        self.record.update(stopped_reachable_s=time.monotonic() - stop_started)
        # Let the streams of the stopped nodes end, so the last lines (torchrun's summary) are in.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(r.following and r.name not in to_reap for r in self._runners.values()):
            self._pump(0.1)
        self._pump(0.05)
        unreaped = self._reap(to_reap, leftovers)
        failed_node: Optional[str] = None
        failed_rank: Optional[int] = None
        last: list[str] = []
        if status == "failed":  # an operator's stop blames nobody (its SIGTERMs show up as worker failures)
            failed_node, failed_rank = self.failures.attribute(
                trigger_node, trigger_rank, rank_nodes={r: i.node for r, i in self.progress.ranks.items()}, errors=self.progress.errors
            )
            last = self.failures.last_lines(failed_node, failed_rank, self.options.last_lines)
        exit_code = EXIT_STOPPED if status == "stopped" else EXIT_FAILED
        result = RunResult(
            self.run_id,
            status,
            exit_code,
            reason=reason,
            failed_node=failed_node,
            failed_rank=failed_rank,
            last_lines=last,
            leftovers=leftovers,
            unreaped=unreaped,
            stalled_ranks=list(stalled),
        )
        return self._finish(result)

    def _reap(self, nodes: Sequence[str], leftovers: dict[str, list[int]]) -> list[str]:
        """Keep trying to stop the run on ``nodes`` (unreachable at stop time) for ``reap_for_s``."""
        if not nodes:
            return []
        opts = self.options
        waiting = set(nodes)
        self._note(
            f"waiting up to {opts.reap_for_s:.0f} s for {', '.join(sorted(waiting))} to answer, to reap its processes "
            f"(Ctrl-C twice gives up; `ftwiz --stop {self.run_id}` does it later)",
            "warn",
        )
        self.record.update(unreaped=sorted(waiting))
        deadline = time.monotonic() + opts.reap_for_s
        attempts: dict[str, Future] = {}
        next_try: dict[str, float] = {}
        while waiting and time.monotonic() < deadline and not self._abandon_reap:
            self._pump(0.2)
            now = time.monotonic()
            for name in list(waiting):
                future = attempts.get(name)
                if future is None:
                    if now >= next_try.get(name, 0):
                        attempts[name] = self._runners[name].submit(lambda name=name: self._reap_one(name))
                    continue
                if not future.done():
                    continue
                del attempts[name]
                try:
                    report = future.result()
                except Exception:
                    next_try[name] = now + 1.0
                    continue
                waiting.discard(name)
                self._record_kill(name, report)
                self.record.update_node(name, reaped_at=time.time())
                if report.get("remaining"):
                    leftovers[name] = report["remaining"]
                killed = [k["pid"] for k in report.get("killed") or []]
                self._note(f"{name} answers again: reaped {len(killed)} leftover process(es) {killed}" if killed else f"{name} answers again: nothing of the run was left there")
        if waiting:
            self._note(f"gave up waiting for {', '.join(sorted(waiting))}: run `ftwiz --stop {self.run_id}` once it is back", "error")
        self.record.update(unreaped=sorted(waiting))
        return sorted(waiting)

    def _reap_one(self, name: str) -> dict:
        """(runner thread) One attempt to stop the run on an unreachable node: SSH, else its agent."""
        runner = self._runners[name]
        try:
            return runner.kill(self.options.stop_grace_s, fresh=True, connect_timeout=self.options.reap_connect_timeout_s)
        except Exception as ssh_exc:
            report = agent_stop(self.config, name, self.run_id)
            if report is None:
                raise ssh_exc
            return report

    # ------------------------------------------------------------------ endings

    def _succeeded(self) -> RunResult:
        self._pump(0.05)
        return self._finish(RunResult(self.run_id, "succeeded", EXIT_OK, reason="every node's torchrun exited with code 0"))

    def _detached(self, reason: str, exit_code: int = EXIT_OK) -> RunResult:
        self._note(f"{reason}. Re-attach: ftwiz --attach {self.run_id}   Stop: ftwiz --stop {self.run_id}")
        return self._finish(RunResult(self.run_id, "detached", exit_code, reason=reason))

    def _finish(self, result: RunResult) -> RunResult:
        self._finished = result
        failed = None
        if result.failed_node is not None or result.failed_rank is not None:
            failed = {"node": result.failed_node, "rank": result.failed_rank, "last_lines": result.last_lines}
        self.record.data.update(
            status=result.status,
            exit_code=result.exit_code,
            reason=result.reason,
            failed=failed,
            leftovers=result.leftovers,
            unreaped=result.unreaped,
            ended_at=time.time() if result.status != "detached" else None,
            detached_at=time.time() if result.status == "detached" else None,
            progress=dataclasses.asdict(self.progress.snapshot),
            ranks={str(r): dataclasses.asdict(i) for r, i in sorted(self.progress.ranks.items())},
            world_size=self.progress.snapshot.world_size,
            root_causes=self.failures.root_causes,
        )
        self.record.save()
        self._close_runners()
        self.record.close()
        self._emit(RunFinished(result))
        return result

    # ------------------------------------------------------------------ stop a detached run

    @classmethod
    def stop_detached(cls, config: FtwizConfig, run_id: str, *, options: Optional[RunOptions] = None) -> RunResult:
        """Stop a run on every node without attaching (``ftwiz --stop``); returns what was killed where."""
        options = options or RunOptions()
        base = runs_dir(options.runs_dir)
        try:
            stored = load_record(base, run_id)
        except (OSError, ValueError):
            stored = {}
        run = cls(config, run_id=run_id, options=options)
        run.record.data = _merge_record(stored, run.record.data, keep_status=True)
        for node in config.nodes:
            runner = NodeRunner(node, config.cluster, run_id, run._outbox, tick_s=options.tick_s).start()
            runner.pgid = ((stored.get("nodes") or {}).get(node.name) or {}).get("pgid")
            run._runners[node.name] = runner
        leftovers, failed = run._kill_everywhere(list(run._runners.values()))
        for name in failed:
            report = agent_stop(config, name, run_id)
            if report is not None:
                failed.remove(name)
                run._record_kill(name, report)
                if report.get("remaining"):
                    leftovers[name] = report["remaining"]
        ok = not leftovers and not failed
        reason = "stopped with ftwiz --stop" + ("" if ok else f"; not reached: {', '.join(failed)}" if failed else "; leftovers remain")
        result = RunResult(run_id, "stopped", EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=failed)
        return run._finish(result)


def _merge_record(stored: Mapping[str, Any], fresh: Mapping[str, Any], *, keep_status: bool) -> dict[str, Any]:
    """What the launch recorded, plus what a later attach or stop adds.

    A run with no record here (started from another machine, or a mistyped id) gets ``created_at =
    0`` so it never becomes "the latest run" that ``--resume`` and ``--attach`` pick.
    """
    merged = dict(stored)
    merged.update({k: v for k, v in fresh.items() if k not in stored or (k == "status" and not keep_status)})
    if not stored:
        merged["created_at"] = 0
    return merged
