"""A run that goes on without supervision: re-attach to it (``ftwiz --attach``), or stop it (``ftwiz --stop``).

One part of :class:`tui.launch.run.Run`. Both open the stored record without writing it: a failed
attach leaves ``run.json`` exactly as it was (its pgids, commands, run dirs, status and
``created_at``), and the controller-side node logs are replayed afresh only once every node answered.
"""

from __future__ import annotations

import time
from functools import partial

from tui.exitcodes import EXIT_FAILED, EXIT_OK
from tui.launch.events import NodeState, RunResult
from tui.launch.launching import LaunchMixin
from tui.launch.options import LaunchError
from tui.launch.runner import NodeRunner
from tui.launch.status import RunStatus
from tui.launch.support import agent_stop

__all__ = ["DetachedMixin"]


class DetachedMixin(LaunchMixin):
    """Attaching to and stopping a detached run (see the module docstring)."""

    def _attach_nodes(self) -> None:
        stored = self.record.model.nodes
        for node in self.config.nodes:
            runner = self._new_runner(node.name)
            runner.rundir_abs = stored[node.name].rundir if node.name in stored else None
            self._set_state(node.name, NodeState.CONNECTING)

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
            self._set_state(name, NodeState.RUNNING, "attached")
        self.record.update(status=RunStatus.RUNNING, attached_at=time.time())
        self._note(f"attached to run {self.run_id} on {len(self._runners)} node(s); replaying the node logs")

    def _stop_detached(self) -> RunResult:
        """Kill the run on every node (SSH, else the node's agent); record what was killed where."""
        stored = self.record.model.nodes
        for node in self.config.nodes:
            runner = self._new_runner(node.name)
            runner.pgid = stored[node.name].pgid if node.name in stored else None
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
        ok = not leftovers and not unreached
        reason = "stopped with ftwiz --stop" + ("" if ok else f"; not reached: {', '.join(unreached)}" if unreached else "; leftovers remain")
        result = RunResult(self.run_id, RunStatus.STOPPED, EXIT_OK if ok else EXIT_FAILED, reason=reason, leftovers=leftovers, unreaped=unreached)
        return self._finish(result)


def _attach_one(runner: NodeRunner) -> None:
    """(runner thread) Connect, find the run dir when the record does not say, follow the log from its start."""
    runner.connect()
    if runner.rundir_abs is None:
        runner.locate()
    runner.follow(0)
