"""A run that goes on without supervision: re-attach to it (``ftwiz --attach``), or stop it (``ftwiz --stop``).

One part of :class:`tui.launch.run.Run`. Both open the stored record without writing it: a failed
attach leaves ``run.json`` exactly as it was (its pgids, commands, run dirs, status and
``created_at``), and the controller-side node logs are replayed afresh only once every node answered.
A stop signals a node's process group only with its leader's recorded start time (the node helper checks it),
and never for a run whose record is final.
"""

from __future__ import annotations

import time
from functools import partial

from tui.exitcodes import EXIT_FAILED, EXIT_OK
from tui.launch.events import RunNodeState, RunResult
from tui.launch.launching import LaunchMixin
from tui.launch.options import LaunchError
from tui.launch.runner import NodeRunner
from tui.launch.support import agent_stop
from tui.runs.status import ENDED, RunStatus

__all__ = ["DetachedMixin"]


class DetachedMixin(LaunchMixin):
    """Attaching to and stopping a detached run (see the module docstring)."""

    def _attach_nodes(self) -> None:
        stored = self.record.model.nodes
        for node in self.config.nodes:
            runner = self._new_runner(node.name)
            runner.rundir_abs = stored[node.name].rundir if node.name in stored else None
            self._set_state(node.name, RunNodeState.CONNECTING)

        futures = {name: r.submit(partial(_attach_one, r)) for name, r in self._runners.items()}
        problems = self._collect(futures, timeout=self.config.cluster.ssh_connect_timeout_s + 60)
        if problems:
            self._close_runners()
            raise LaunchError(f"could not re-attach to run {self.run_id}; its record is unchanged", problems)
        # The node-side log is the full story: the controller-side copy starts afresh.
        for name in self._runners:
            self.record.reset_log(name)
        world = self.record.model.world_size
        self.supervisor.expected_ranks = world
        self.supervisor.started(self.clock())
        for name in self._runners:
            self._set_state(name, RunNodeState.RUNNING, "attached")
        self.record.update(status=RunStatus.RUNNING, attached_at=time.time())
        self._note(f"attached to run {self.run_id} on {len(self._runners)} node(s); replaying the node logs")

    def _stop_detached(self) -> RunResult:
        """Kill the run on every node (SSH, else the node's agent); record what was killed where.

        A run whose record is final is not stopped again (see :meth:`_stop_ended`).
        """
        model = self.record.model
        if model.status in ENDED:
            return self._stop_ended()
        for node in self.config.nodes:
            runner = self._new_runner(node.name)
            stored = model.nodes.get(node.name)
            if stored is not None:  # the node helper signals the group only while its leader's start time matches
                runner.pgid, runner.pgid_start = stored.pgid, stored.pgid_start
        leftovers, unreached = self._kill_on_runners()
        ok = not leftovers and not unreached
        reason = "stopped with ftwiz --stop" + ("" if ok else f"; not reached: {', '.join(unreached)}" if unreached else "; leftovers remain")
        result = RunResult(self.run_id, RunStatus.STOPPED, EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=unreached)
        return self._finish(result)

    def _stop_ended(self) -> RunResult:
        """``--stop`` of a finished run: nothing is signalled by group id (the record's pgids may be other
        processes' by now). Nodes the record lists as unreaped or with leftovers are reaped by the run's tag
        (``FTWIZ_RUN_ID`` and ``FTWIZ_NODE`` in a process's environment) and only that is recorded; otherwise
        the record is left byte for byte as it was."""
        model = self.record.model
        status = RunStatus(model.status)
        names = {n.name for n in self.config.nodes}
        behind = sorted((set(model.unreaped) | set(model.leftovers)) & names)
        finished = f"already finished ({status.value})"
        if not behind:
            return self._finish(RunResult(self.run_id, status, EXIT_OK, reason=finished), save=False)
        for name in behind:
            self._new_runner(name)  # no pgid: the tag alone decides
        leftovers, unreached = self._kill_on_runners()
        self.record.update(leftovers=leftovers, unreaped=unreached)
        ok = not leftovers and not unreached
        reason = f"{finished}; reaped what was left on {', '.join(behind)}" + ("" if ok else "; some nodes still not reached or leftovers remain")
        result = RunResult(self.run_id, status, EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=unreached)
        return self._finish(result, save=False)

    def _kill_on_runners(self) -> tuple[dict[str, list[int]], list[str]]:
        """TERM → grace → KILL through every runner (SSH), then through the agents of the nodes SSH missed."""
        leftovers, failed = self._kill_everywhere(list(self._runners.values()))
        unreached: list[str] = []
        for name in failed:  # a copy of the list is never changed while it is walked
            report = agent_stop(self.config, name, self.run_id)
            if report is None:
                unreached.append(name)
                continue
            self._record_kill(name, report)
            if report.get("remaining"):
                leftovers[name] = report["remaining"]
        return leftovers, unreached


def _attach_one(runner: NodeRunner) -> None:
    """(runner thread) Connect, find the run dir when the record does not say, follow the log from its start."""
    runner.connect()
    if runner.rundir_abs is None:
        runner.locate()
    runner.follow(0)
