"""The launch fan-out: connect to every node, plan once, send each node its slice, then start torchrun everywhere.

A part of :class:`tui.launch.run.Run`, over the state of :class:`tui.launch.base.RunCore` and the
:class:`tui.launch.stopping.StopSequence` it uses to stop what started when a node fails. Nothing starts anywhere unless every node is ready: *prepare* (link and
run dir on every node; then the one :class:`~tui.launch.launchplan.LaunchPlan`, built when every node has said
where its run dir is; then each node's slice of it; a prepared node starts nothing on its own) and *go*. A node
that fails either phase fails the launch, and the nodes that had started are stopped.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any, Mapping, NoReturn

from tui.codeship import CodeDirError
from tui.exitcodes import EXIT_FAILED
from tui.launch.base import RunCore
from tui.launch.events import RunNodeState, RunResult
from tui.launch.launchplan import LaunchPlan, Sharding, build_launch_plan
from tui.launch.options import LaunchError
from tui.launch.runner import NodeRunner
from tui.launch.stopping import StopSequence
from tui.launch.support import plan_network, workload_files
from tui.runs.status import RunStatus

__all__ = ["Launcher"]


class Launcher:
    """Launching a run (see the module docstring)."""

    def __init__(
        self,
        core: RunCore,
        stop: StopSequence,
        *,
        network_env: "Mapping[str, Mapping[str, str]] | None",
        sharding: "Sharding | None",
        compute: "Any",
        micro_caps: "Mapping[str, int] | None" = None,
        start_not_before: "float | None",
    ) -> None:
        self.core = core
        self.stop = stop
        #: The interface environment and the sharding the checklist approved; None: planned once, at launch.
        self.network_env = network_env
        self.sharding = sharding
        #: The checklist's compute probe (:class:`shared.computeplan.ProbeFigures`): your own code's balance shares.
        self.compute = compute
        #: ``balance = "auto"``: each GPU node's largest micro-batch (``mem.fit``'s estimate); None without a checklist.
        self.micro_caps = micro_caps
        #: Every decision of the launch, made once (:class:`~tui.launch.launchplan.LaunchPlan`); None until launched.
        self.launch_plan: "LaunchPlan | None" = None
        self.resume = bool(core.record.model.resume)
        self.output_dir = core.record.model.output_dir or core.config.job.output_dir
        #: Unix time before which torchrun must not start (the checklist's test listener still holds
        #: the rendezvous port on the master until then); the nodes are prepared meanwhile.
        self.start_not_before = start_not_before

    def launch(self) -> None:
        """Connect to every node, copy the job, start torchrun everywhere.

        Raises :class:`LaunchError` naming each node that failed, with its fix; in that case nothing of
        this run is left running anywhere (nodes that had started are stopped again).
        """
        t0 = self.core.clock()
        self.core.record.update(launched_at=time.time())
        for node in self.core.config.nodes:
            self.core.new_runner(node.name)
            self.core.set_state(node.name, RunNodeState.CONNECTING)
        try:
            package = workload_files()
        except RuntimeError as exc:
            self.core.close_runners()
            raise LaunchError(str(exc)) from None
        futures = {name: r.submit(partial(self._open_one, r)) for name, r in self.core.runners.items()}
        problems = self.core.collect(futures, timeout=self.core.config.cluster.ssh_connect_timeout_s + 60)
        if problems:
            self._launch_failed("could not prepare every node; nothing was started", problems)
        plan = self._plan(package)
        futures = {name: r.submit(partial(r.send_job, plan.payload(name))) for name, r in self.core.runners.items()}
        problems = self.core.collect(futures, timeout=120)
        if problems:
            self._launch_failed("could not prepare every node; nothing was started", problems)
        t_prepared = self.core.clock()
        self._wait_for_go()
        if self.core.supervisor.stop_reason is not None:
            # Stopped before "go": closing the prepared execs starts nothing anywhere.
            self._launch_failed(f"not started: {self.core.supervisor.stop_reason}", {})
        for name in self.core.runners:
            self.core.set_state(name, RunNodeState.STARTING)
        futures = {name: r.submit(r.launch) for name, r in self.core.runners.items()}
        problems = self.core.collect(futures, timeout=60)
        if problems:
            self.core.note("a node failed to start: stopping the nodes that did", "error")
            self.stop.kill_everywhere(list(self.core.runners.values()))
            self._launch_failed("torchrun did not start on every node; the others were stopped", problems)
        started = self.core.clock()
        self.core.supervisor.expected_ranks = sum(s.plan.nproc for s in plan.nodes.values()) or None
        self.core.supervisor.started(started)
        for name, runner in self.core.runners.items():
            self.core.set_state(name, RunNodeState.RUNNING, f"pgid {runner.pgid}")
            self.core.record.update_node(name, save=False, pgid=runner.pgid, pgid_start=runner.pgid_start)
        self.core.record.update(status=RunStatus.RUNNING, started_at=time.time(), fanout_s=started - t0, prepare_s=t_prepared - t0)
        self.core.note(f"run {self.core.run_id} started on {len(self.core.runners)} node(s) in {started - t0:.1f} s")

    def _open_one(self, runner: NodeRunner) -> str:
        """(runner thread) Connect and create the run dir; the node then waits for its job."""
        runner.connect()
        return runner.open_rundir()

    def _plan(self, package: Mapping[str, bytes]) -> LaunchPlan:
        """The launch plan, built once now that every node said where its run dir is; kept in ``run.json``."""
        if self.network_env is None:
            self.network_env = plan_network(self.core.config, self.core.reports)
        config_source = self.core.record.model.config_source
        try:
            plan = build_launch_plan(
                self.core.config, run_id=self.core.run_id, rundirs={name: r.rundir_abs or "" for name, r in self.core.runners.items()},
                reports=self.core.reports, network_env=self.network_env, sharding=self.sharding, compute=self.compute, micro_caps=self.micro_caps, package=package,
                resume=self.resume, output_dir=self.output_dir,
                config_dir=os.path.dirname(config_source) if config_source else None,
            )
        except CodeDirError as exc:
            self._launch_failed(f"cannot ship [job] code_dir: {exc}; nothing was started", {})
        self.launch_plan = plan
        for name, node in plan.nodes.items():
            self.core.plans[name] = node.plan
            self.core.record.update_node(name, save=False, **node.record)
        self.core.record.update(**plan.run_record)
        if plan.balance is not None:
            self.core.note(plan.balance.summary())
        return plan

    def _wait_for_go(self) -> None:
        """Until ``start_not_before`` (the checklist's test listener still holds the rendezvous port), unless stopped."""
        if self.start_not_before is None or self.start_not_before <= time.time():
            return
        wait = self.start_not_before - time.time()
        self.core.note(f"waiting {wait:.1f} s for the checklist's test listener to free port {self.core.config.cluster.rendezvous_port} on the master")
        while time.time() < self.start_not_before and self.core.supervisor.stop_reason is None:
            self.core.pump(0.1)

    def _launch_failed(self, message: str, problems: Mapping[str, str]) -> NoReturn:
        self.core.close_runners()
        details = "; ".join(f"{n}: {p}" for n, p in problems.items())
        self.core.finish(RunResult(self.core.run_id, RunStatus.LAUNCH_FAILED, EXIT_FAILED, reason=f"{message}: {details}" if details else message))
        raise LaunchError(message, problems)
