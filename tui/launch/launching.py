"""The launch fan-out: connect to every node, send the job, then start torchrun everywhere at once.

One part of :class:`tui.launch.run.Run`. Two phases, so that nothing starts anywhere unless every
node is ready: *prepare* (link, run dir, job files; a prepared node starts nothing on its own) and
*go*. A node that fails either phase fails the launch, and the nodes that had started are stopped.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Mapping, NoReturn

from shared.config import NodeConfig
from tui.exitcodes import EXIT_FAILED
from tui.launch.events import RunNodeState, RunResult
from tui.launch.nodefiles import node_files
from tui.launch.options import LaunchError
from tui.launch.plan import Payload
from tui.launch.runner import NodeRunner
from tui.launch.stopping import StopMixin
from tui.launch.support import workload_files
from tui.runs.status import RunStatus

__all__ = ["LaunchMixin"]


class LaunchMixin(StopMixin):
    """Launching a run (see the module docstring)."""

    network_env: "Mapping[str, Mapping[str, str]] | None"
    resume: bool
    output_dir: str
    start_not_before: "float | None"

    def launch(self) -> None:
        """Connect to every node, copy the job, start torchrun everywhere.

        Raises :class:`LaunchError` naming each node that failed, with its fix; in that case nothing of
        this run is left running anywhere (nodes that had started are stopped again).
        """
        t0 = self.clock()
        self.record.update(launched_at=time.time())
        for node in self.config.nodes:
            self._new_runner(node.name)
            self._set_state(node.name, RunNodeState.CONNECTING)
        try:
            package = workload_files()
        except RuntimeError as exc:
            self._close_runners()
            raise LaunchError(str(exc)) from None
        futures = {name: r.submit(partial(self._prepare_one, r, package)) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=self.config.cluster.ssh_connect_timeout_s + 120)
        if problems:
            self._launch_failed("could not prepare every node; nothing was started", problems)
        t_prepared = self.clock()
        self._wait_for_go()
        if self.supervisor.stop_reason is not None:
            # Stopped before "go": closing the prepared execs starts nothing anywhere.
            self._launch_failed(f"not started: {self.supervisor.stop_reason}", {})
        for name in self._runners:
            self._set_state(name, RunNodeState.STARTING)
        futures = {name: r.submit(r.launch) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=60)
        if problems:
            self._note("a node failed to start: stopping the nodes that did", "error")
            self._kill_everywhere(list(self._runners.values()))
            self._launch_failed("torchrun did not start on every node; the others were stopped", problems)
        started = self.clock()
        self.supervisor.expected_ranks = sum(p.nproc for p in self.plans.values()) or None
        self.supervisor.started(started)
        for name, runner in self._runners.items():
            self._set_state(name, RunNodeState.RUNNING, f"pgid {runner.pgid}")
            self.record.update_node(name, save=False, pgid=runner.pgid, pgid_start=runner.pgid_start)
        self.record.update(status=RunStatus.RUNNING, started_at=time.time(), fanout_s=started - t0, prepare_s=t_prepared - t0)
        self._note(f"run {self.run_id} started on {len(self._runners)} node(s) in {started - t0:.1f} s")

    def _prepare_one(self, runner: NodeRunner, package: Mapping[str, bytes]) -> str:
        """(runner thread) Connect, create the run dir, send the job; nothing starts yet."""
        runner.connect()
        return runner.prepare(partial(self._node_files, runner.node, package=package))

    def _wait_for_go(self) -> None:
        """Until ``start_not_before`` (the checklist's test listener still holds the rendezvous port), unless stopped."""
        if self.start_not_before is None or self.start_not_before <= time.time():
            return
        wait = self.start_not_before - time.time()
        self._note(f"waiting {wait:.1f} s for the checklist's test listener to free port {self.config.cluster.rendezvous_port} on the master")
        while time.time() < self.start_not_before and self.supervisor.stop_reason is None:
            self._pump(0.1)

    def _node_files(self, node: NodeConfig, workdir_abs: str, rundir_abs: str, package: Mapping[str, bytes]) -> Payload:
        """Everything a node needs in its run directory (called on that node's runner thread)."""
        built = node_files(
            self.config, node, run_id=self.run_id, workdir_abs=workdir_abs, rundir_abs=rundir_abs, package=package,
            reports=self.reports, network_env=self.network_env, resume=self.resume, output_dir=self.output_dir,
            config_dir=os.path.dirname(self.record.model.config_source) if self.record.model.config_source else None,
        )
        self.plans[node.name] = built.plan
        self.record.update_node(node.name, **built.record)
        if built.run_record:
            self.record.update(**built.run_record)
        return built.payload()

    def _launch_failed(self, message: str, problems: Mapping[str, str]) -> NoReturn:
        self._close_runners()
        details = "; ".join(f"{n}: {p}" for n, p in problems.items())
        self._finish(RunResult(self.run_id, RunStatus.LAUNCH_FAILED, EXIT_FAILED, reason=f"{message}: {details}" if details else message))
        raise LaunchError(message, problems)
