"""A run that goes on without supervision: re-attach to it (``ftwiz --attach``), or stop it (``ftwiz --stop``).

A part of :class:`tui.launch.run.Run`, over the state of :class:`tui.launch.base.RunCore`, stopping through its
:class:`tui.launch.stopping.StopSequence`. Both open the stored record without writing it: a failed
attach leaves ``run.json`` exactly as it was (its pgids, commands, run dirs, status and
``created_at``), and the controller-side node logs are replayed afresh only once every node answered.
A stop signals a node's process group only with its leader's recorded start time (the node helper checks it),
and never for a run whose record is final.
"""

from __future__ import annotations

import time
from functools import partial

from tui.exitcodes import EXIT_FAILED, EXIT_OK
from tui.launch.base import RunCore
from tui.launch.events import RunNodeState, RunResult
from tui.launch.options import LaunchError
from tui.launch.runner import NodeRunner
from tui.launch.stopping import StopSequence
from tui.launch.support import agent_stop
from tui.runs.status import ENDED, RunStatus

__all__ = ["Reattach"]


class Reattach:
    """Attaching to and stopping a detached run (see the module docstring)."""

    def __init__(self, core: RunCore, stop: StopSequence) -> None:
        self.core = core
        self.stop = stop

    def attach_nodes(self) -> None:
        stored = self.core.record.model.nodes
        for node in self.core.config.nodes:
            runner = self.core.new_runner(node.name)
            runner.rundir_abs = stored[node.name].rundir if node.name in stored else None
            self.core.set_state(node.name, RunNodeState.CONNECTING)

        futures = {name: r.submit(partial(_attach_one, r)) for name, r in self.core.runners.items()}
        problems = self.core.collect(futures, timeout=self.core.config.cluster.ssh_connect_timeout_s + 60)
        if problems:
            self.core.close_runners()
            raise LaunchError(f"could not re-attach to run {self.core.run_id}; its record is unchanged", problems)
        # The node-side log is the full story: the controller-side copy starts afresh.
        for name in self.core.runners:
            self.core.record.reset_log(name)
        world = self.core.record.model.world_size
        self.core.supervisor.expected_ranks = world
        self.core.supervisor.started(self.core.clock())
        for name in self.core.runners:
            self.core.set_state(name, RunNodeState.RUNNING, "attached")
        self.core.record.update(status=RunStatus.RUNNING, attached_at=time.time())
        self.core.note(f"attached to run {self.core.run_id} on {len(self.core.runners)} node(s); replaying the node logs")

    def stop_detached(self) -> RunResult:
        """Kill the run on every node (SSH, else the node's agent); record what was killed where.

        A run whose record is final is not stopped again (see :meth:`_stop_ended`).
        """
        model = self.core.record.model
        if model.status in ENDED:
            return self._stop_ended()
        for node in self.core.config.nodes:
            runner = self.core.new_runner(node.name)
            stored = model.nodes.get(node.name)
            if stored is not None:  # the node helper signals the group only while its leader's start time matches
                runner.pgid, runner.pgid_start = stored.pgid, stored.pgid_start
        leftovers, unreached = self._kill_on_runners()
        ok = not leftovers and not unreached
        reason = "stopped with ftwiz --stop" + ("" if ok else f"; not reached: {', '.join(unreached)}" if unreached else "; leftovers remain")
        result = RunResult(self.core.run_id, RunStatus.STOPPED, EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=unreached)
        return self.core.finish(result)

    def _stop_ended(self) -> RunResult:
        """``--stop`` of a finished run: nothing is signalled by group id (the record's pgids may be other
        processes' by now). Nodes the record lists as unreaped or with leftovers are reaped by the run's tag
        (``FTWIZ_RUN_ID`` and ``FTWIZ_NODE`` in a process's environment) and only that is recorded; otherwise
        the record is left byte for byte as it was."""
        model = self.core.record.model
        status = RunStatus(model.status)
        names = {n.name for n in self.core.config.nodes}
        behind = sorted((set(model.unreaped) | set(model.leftovers)) & names)
        finished = f"already finished ({status.value})"
        if not behind:
            return self.core.finish(RunResult(self.core.run_id, status, EXIT_OK, reason=finished), save=False)
        for name in behind:
            self.core.new_runner(name)  # no pgid: the tag alone decides
        leftovers, unreached = self._kill_on_runners()
        self.core.record.update(leftovers=leftovers, unreaped=unreached)
        ok = not leftovers and not unreached
        reason = f"{finished}; reaped what was left on {', '.join(behind)}" + ("" if ok else "; some nodes still not reached or leftovers remain")
        result = RunResult(self.core.run_id, status, EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=unreached)
        return self.core.finish(result, save=False)

    def _kill_on_runners(self) -> tuple[dict[str, list[int]], list[str]]:
        """TERM → grace → KILL through every runner (SSH), then through the agents of the nodes SSH missed."""
        leftovers, failed = self.stop.kill_everywhere(list(self.core.runners.values()))
        unreached: list[str] = []
        for name in failed:  # a copy of the list is never changed while it is walked
            report = agent_stop(self.core.config, name, self.core.run_id)
            if report is None:
                unreached.append(name)
                continue
            self.stop.record_kill(name, report)
            if report.get("remaining"):
                leftovers[name] = report["remaining"]
        return leftovers, unreached


def _attach_one(runner: NodeRunner) -> None:
    """(runner thread) Connect, find the run dir when the record does not say, follow the log from its start."""
    runner.connect()
    if runner.rundir_abs is None:
        runner.locate()
    runner.follow(0)
