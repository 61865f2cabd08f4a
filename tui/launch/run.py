"""A supervised run: start torchrun on every node, stream, watch, and stop everything on any failure.

Use from code (the TUI does the same from a ``@work(thread=True)`` worker)::

    run = Run(config, reports=reports)           # reports: agent NodeReports (GPU counts, cores, NICs)
    unsubscribe = run.subscribe(on_event)       # LogLine, ProgressChanged, NodeStateChanged, RunNote, RunFinished
    run.launch()                                 # raises LaunchError; nothing is left running then
    result = run.supervise()                     # blocks until the job ends, is stopped or detached
    # from any thread: run.request_stop("why"), run.detach()

    run = Run.attach(config, run_id)             # a detached run: replay the node logs, supervise again
    Run.stop_detached(config, run_id)            # stop it everywhere without supervising

This module is the driver: a loop that applies the runners' messages, asks the decision core
(:class:`tui.launch.supervisor.Supervisor`: which node or rank to blame, one node silent vs. all,
the grace on return, stall and hang windows, when the run is over) what to do, and does it. It is
composed of parts over one shared state (:class:`tui.launch.base.RunCore`: record, runners, progress,
supervisor, observers): the launch (:class:`tui.launch.launching.Launcher`), the stop sequence
(:class:`tui.launch.stopping.StopSequence`) and detached runs (:class:`tui.launch.detached.Reattach`);
the transport is the runners' (``RunOptions.link_factory``).

Stop-all triggers: a node's torchrun ends non-zero; a node goes silent while another still
answers; a stall (no progress or heartbeat for ``job.stall_timeout_s``); before the first step, a
rank stopped or every rank idle for ``job.stall_timeout_s`` (a loading rank, whose CPU or I/O
moves, keeps ``job.first_step_grace_s``); and :meth:`Run.request_stop`. A stall first dumps every
rank's stack into the log. When *every* node goes silent at once, the operator's own network is the
likely cause: the run is left alone and re-attached when the nodes answer again.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future
from functools import partial
from typing import Any, Callable, Mapping, Optional, Sequence

from shared.config import FtwizConfig
from tui.exitcodes import EXIT_OK
from tui.launch.base import RunCore
from tui.launch.detached import Reattach
from tui.launch.events import RunNodeState, RunResult
from tui.launch.launching import Launcher
from tui.launch.launchplan import LaunchPlan, Sharding
from tui.launch.options import LaunchError, RunOptions
from tui.launch.stopping import StopSequence
from tui.launch.supervisor import Detach, Keep, StallFound, StopAll, Succeed
from tui.runs.record import RunRecord, new_run_id, runs_dir
from tui.runs.status import RunStatus

__all__ = ["LaunchError", "Run", "RunOptions"]


class Run(RunCore):
    """One run on every node of ``config`` (see the module docstring)."""

    def __init__(
        self,
        config: FtwizConfig,
        *,
        run_id: Optional[str] = None,
        options: Optional[RunOptions] = None,
        reports: Optional[Mapping[str, Any]] = None,
        network_env: Optional[Mapping[str, Mapping[str, str]]] = None,
        sharding: Optional[Sharding] = None,
        compute: Optional[Any] = None,
        micro_caps: Optional[Mapping[str, int]] = None,
        resume: bool = False,
        output_dir: Optional[str] = None,
        resumed_from: Optional[str] = None,
        config_source: Optional[str] = None,
        start_not_before: Optional[float] = None,
        record: Optional[RunRecord] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        options = options or RunOptions()
        if record is None:
            run_id = run_id or new_run_id()
            record = RunRecord.create(
                runs_dir(options.runs_dir),
                run_id,
                cluster=config.cluster.name,
                config=config.model_dump(mode="json"),
                config_source=config_source,
                resume=resume,
                resumed_from=resumed_from,
                output_dir=output_dir or config.job.output_dir,
                nodes={n.name: {"host": n.host} for n in config.nodes},
            )
        super().__init__(config, record, options=options, reports=reports, clock=clock)
        if record.index_problem:
            self.note(record.index_problem, "warn")
        self.stop = StopSequence(self)
        self.launcher = Launcher(self, self.stop, network_env=network_env, sharding=sharding, compute=compute,
                                 micro_caps=micro_caps, start_not_before=start_not_before)
        self.reattach = Reattach(self, self.stop)
        self._reconnects: dict[str, Future] = {}
        if options.on_run is not None:
            options.on_run(self)

    def launch(self) -> None:
        """Connect to every node, copy the job, start torchrun everywhere (:meth:`Launcher.launch`).

        Raises :class:`LaunchError` naming each node that failed, with its fix; in that case nothing of
        this run is left running anywhere (nodes that had started are stopped again).
        """
        self.launcher.launch()

    @property
    def launch_plan(self) -> Optional[LaunchPlan]:
        """Every decision of the launch, made once; None until launched."""
        return self.launcher.launch_plan

    @property
    def resume(self) -> bool:
        """Whether this run resumes from a checkpoint (its record says)."""
        return self.launcher.resume

    def keep_checklist(self, results: Sequence[Any], sync: Optional[Any]) -> None:
        """Keep the checklist this launch follows in ``run.json`` (rows, the gradient-sync forecast) and show
        the forecast beside the sync time the run measures."""
        rows = [r.model_dump(mode="json") if hasattr(r, "model_dump") else dict(r) for r in results]
        forecast = sync.model_dump(mode="json") if sync is not None and hasattr(sync, "model_dump") else None
        self.record.update(checklist=rows, sync_forecast=forecast)
        # the mesh's "every link at NODE is slow" row: the straggler decision's evidence for a slow link
        slow = [r.get("node") for r in rows if r.get("id") == "net.mesh" and r.get("status") == "warn"
                and r.get("node") and "every link" in str(r.get("detail", ""))]
        self.progress.slow_link_node = slow[0] if slow else None
        if forecast is not None and isinstance(forecast.get("sync_s"), (int, float)):
            self.progress.snapshot = dataclasses.replace(self.progress.snapshot, sync_forecast_s=float(forecast["sync_s"]))

    # ------------------------------------------------------------------ detached runs

    @classmethod
    def attach(cls, config: FtwizConfig, run_id: str, *, options: Optional[RunOptions] = None) -> "Run":
        """Reconnect to a detached run: replay every node's log from the start and supervise again.

        Raises :class:`LaunchError` when a node cannot be reached or holds no such run, and
        :class:`tui.runs.index.RunNotFound` when there is no record under the runs directory; the
        stored record is then left exactly as it was (and none is made).
        """
        options = options or RunOptions()
        run = cls(config, options=options, record=RunRecord.open(runs_dir(options.runs_dir), run_id))
        run.reattach.attach_nodes()
        return run

    @classmethod
    def stop_detached(cls, config: FtwizConfig, run_id: str, *, options: Optional[RunOptions] = None) -> RunResult:
        """Stop a run on every node without attaching (``ftwiz --stop``); returns what was killed where."""
        options = options or RunOptions()
        run = cls(config, options=options, record=RunRecord.open(runs_dir(options.runs_dir), run_id))
        return run.reattach.stop_detached()

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
                interrupted = isinstance(exc, KeyboardInterrupt)
                reason = "interrupted" if interrupted else f"supervisor error: {type(exc).__name__}: {exc}"
                self.stop.stop_all(reason, status=RunStatus.STOPPED if interrupted else RunStatus.FAILED)
            if isinstance(exc, KeyboardInterrupt):
                assert self._finished is not None
                return self._finished
            raise

    def _supervise(self) -> RunResult:
        sup = self.supervisor
        while True:
            self.pump(0.2)
            for name, runner in self.runners.items():
                view = sup.nodes[name]
                view.lost = runner.lost
                if runner.last_rx is not None:
                    view.last_rx = runner.last_rx
            decision = sup.decide(self.clock())
            if isinstance(decision, Keep):
                self._keep(decision)
                continue
            self.progress.settled = True  # the run ends from here: its dying steps set no pace
            if isinstance(decision, StopAll):
                return self.stop.stop_all(
                    decision.reason,
                    status=decision.status,
                    trigger_node=decision.trigger_node,
                    trigger_rank=decision.trigger_rank,
                    unreachable=decision.unreachable,
                    stalled=decision.stalled,
                )
            if isinstance(decision, StallFound):
                return self._stall_stop(decision)
            if isinstance(decision, Detach):
                return self._detached(decision.reason, decision.exit_code)
            assert isinstance(decision, Succeed)
            self.pump(0)  # what is already posted; a node's last lines come before its end, so nothing is awaited
            return self.finish(RunResult(self.run_id, RunStatus.SUCCEEDED, EXIT_OK, reason="every node's torchrun exited with code 0"))

    def _keep(self, decision: Keep) -> None:
        for level, text in decision.notes:
            self.note(text, level)
        for node, state in decision.states:
            self.set_state(node, state)
        for name in decision.reconnect:
            pending = self._reconnects.get(name)
            if pending is None or pending.done():
                runner = self.runners[name]
                self.set_state(name, RunNodeState.RECONNECTING)
                self._reconnects[name] = runner.submit(partial(runner.reconnect, timeout=self.options.reap_connect_timeout_s))

    def _stall_stop(self, stall: StallFound) -> RunResult:
        """Dump every rank's stack into the log, then stop naming the odd rank(s) out."""
        self.note(f"{stall.reason}; dumping every rank's stack into the log before stopping", "error")
        self.failures.reset_dumps()
        futures = {r.name: r.submit(r.dump_stacks) for r in self.runners.values() if r.ending is None}
        deadline = self.clock() + self.options.dump_wait_s
        while self.clock() < deadline or not all(f.done() for f in futures.values()):
            self.pump(0.1)
            if self.clock() > deadline + 60:
                break
        signalled: list[int] = []
        spied: list[int] = []
        for future in futures.values():
            try:
                report = future.result(timeout=0)
            except Exception:
                continue
            signalled += [s["rank"] for s in report.get("signalled", []) if s.get("rank") is not None]
            spied += [s["rank"] for s in report.get("py_spy", []) if s.get("rank") is not None]
        self.pump(0.2)
        silent = sorted(set(signalled) - self.failures.dumped)
        if silent:
            self.note(f"rank(s) {', '.join(map(str, silent))} did not answer SIGUSR1 with a stack dump: stopped (SIGSTOP) or hung outside Python", "error")
        activity = {str(r): {"node": a.node, "pid": a.pid, "state": a.state, "stopped": a.stopped_since is not None}
                    for r, a in sorted(self.supervisor.activity.ranks.items())}
        self.record.update(
            stalled_ranks=list(stall.stalled),
            stack_dumps_from=sorted(self.failures.dumped),
            stack_dump_silent=silent,
            stack_dumps_py_spy=sorted(spied),
            hang={"before_first_step": stall.before_first_step, "suspects": list(stall.suspects), "ranks": activity},
        )
        suspect = stall.suspects[0] if stall.suspects else (silent[0] if silent else None)
        return self.stop.stop_all(stall.reason, status=RunStatus.FAILED, trigger_rank=suspect, stalled=stall.stalled)

    def _detached(self, reason: str, exit_code: int = EXIT_OK) -> RunResult:
        self.note(f"{reason}. Re-attach: ftwiz --attach {self.run_id}   Stop: ftwiz --stop {self.run_id}")
        return self.finish(RunResult(self.run_id, RunStatus.DETACHED, exit_code, reason=reason))
