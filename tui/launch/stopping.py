"""The stop sequence: TERM → grace → KILL on every node in parallel, then reap the unreachable ones.

A part of :class:`tui.launch.run.Run`, over the state that :class:`tui.launch.base.RunCore` holds. A node
that did not answer is reaped when it answers again, for ``reap_for_s``: over SSH, else through
its agent (``POST /v1/runs/{run_id}/stop``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from functools import partial
from typing import Any, Mapping, Optional, Sequence

from tui.exitcodes import EXIT_FAILED, EXIT_STOPPED
from tui.launch.base import RunCore
from tui.launch.events import RunNodeState, RunResult
from tui.launch.links import NodeGone
from tui.launch.runner import NodeRunner
from tui.launch.support import agent_stop, explain
from tui.runs.status import RunStatus

__all__ = ["StopSequence"]


class StopSequence:
    """Stopping every node of a run (see the module docstring)."""

    def __init__(self, core: RunCore) -> None:
        self.core = core

    def kill_everywhere(self, runners: Sequence[NodeRunner]) -> tuple[dict[str, list[int]], list[str]]:
        """TERM → grace → KILL on each runner's node in parallel; returns (leftovers, nodes that did not answer)."""
        grace = self.core.options.stop_grace_s
        futures = {r.name: r.submit(partial(r.kill, grace)) for r in runners}
        leftovers: dict[str, list[int]] = {}
        failed: list[str] = []
        deadline = self.core.clock() + grace + 25
        pending = dict(futures)
        while pending and self.core.clock() < deadline:
            self.core.pump(0.1)
            for name, future in list(pending.items()):
                if not future.done():
                    continue
                del pending[name]
                try:
                    report = future.result()
                except NodeGone as exc:
                    report = _gone_report(exc)
                except Exception as exc:
                    failed.append(name)
                    self.core.note(f"{name}: could not reach it to stop the run ({explain(exc)}); will retry", "warn")
                    continue
                self.record_kill(name, report)
                if report.get("stopped_before"):
                    self.core.stopped_first_on.append(name)
                if report.get("remaining"):
                    leftovers[name] = report["remaining"]
        failed += list(pending)
        return leftovers, failed

    def record_kill(self, node: str, report: Mapping[str, Any]) -> None:
        killed = report.get("killed") or []
        self.core.record.update_node(node, killed=killed, remaining=report.get("remaining") or [])
        by_kill = sum(1 for k in killed if k.get("signal") == "SIGKILL")
        if report.get("remaining"):
            self.core.note(f"{node}: processes still there after SIGKILL: {report['remaining']}", "error")
            self.core.set_state(node, RunNodeState.FAILED, f"leftovers {report['remaining']}")
        else:
            detail = f"{len(killed)} process(es) stopped" + (f", {by_kill} needed SIGKILL" if by_kill else "") if killed else "nothing left running"
            self.core.set_state(node, RunNodeState.STOPPED, detail)

    def stop_all(
        self,
        reason: str,
        *,
        status: RunStatus,
        trigger_node: Optional[str] = None,
        trigger_rank: Optional[int] = None,
        unreachable: Sequence[str] = (),
        stalled: Sequence[int] = (),
    ) -> RunResult:
        stop_started = self.core.clock()
        self.core.note(f"stopping every node: {reason}", "error" if status is RunStatus.FAILED else "warn")
        self.core.record.update(status=RunStatus.STOPPING, stop_reason=reason, stop_requested_at=time.time())
        reachable = [r for r in self.core.runners.values() if r.name not in unreachable]
        for r in reachable:
            self.core.set_state(r.name, RunNodeState.STOPPING)
        for name in unreachable:
            self.core.set_state(name, RunNodeState.UNREACHABLE, "will be reaped when it answers")
        leftovers, failed = self.kill_everywhere(reachable)
        if status is RunStatus.FAILED and self.core.stopped_first_on:
            # `ftwiz --stop` from elsewhere reached these nodes before our own stop: the "failure" we saw was
            # its SIGTERMs arriving at the ranks (the marker it left is written before any signal).
            reason = f"stopped from another ftwiz (ftwiz --stop) on {', '.join(sorted(self.core.stopped_first_on))}; we saw its effect first: {reason}"
            status = RunStatus.STOPPED
            self.core.record.update(stop_reason=reason, save=False)
            self.core.note(reason, "warn")
        to_reap = list(unreachable) + failed
        self.core.record.update(stopped_reachable_s=self.core.clock() - stop_started)
        # Let the streams of the stopped nodes end, so the last lines (torchrun's summary) are in.
        deadline = self.core.clock() + 3.0
        while self.core.clock() < deadline and any(r.following and r.name not in to_reap for r in self.core.runners.values()):
            self.core.pump(0.1)
        self.core.pump(0.05)
        unreaped = self.reap(to_reap, leftovers)
        failed_node: Optional[str] = None
        failed_rank: Optional[int] = None
        last: list[str] = []
        if status is RunStatus.FAILED:  # an operator's stop blames nobody (its SIGTERMs show up as worker failures)
            failed_node, failed_rank = self.core.failures.attribute(
                trigger_node, trigger_rank, rank_nodes={r: i.node for r, i in self.core.progress.ranks.items()}, errors=self.core.progress.errors
            )
            last = self.core.failures.last_lines(failed_node, failed_rank, self.core.options.last_lines)
        result = RunResult(
            self.core.run_id,
            status,
            EXIT_STOPPED if status is RunStatus.STOPPED else EXIT_FAILED,
            reason=reason,
            failed_node=failed_node,
            failed_rank=failed_rank,
            last_lines=last,
            leftovers=leftovers,
            unreaped=unreaped,
            stalled_ranks=list(stalled),
        )
        return self.core.finish(result)

    def reap(self, nodes: Sequence[str], leftovers: dict[str, list[int]]) -> list[str]:
        """Keep trying to stop the run on ``nodes`` (unreachable at stop time) for ``reap_for_s``."""
        if not nodes:
            return []
        opts = self.core.options
        waiting = set(nodes)
        self.core.note(
            f"waiting up to {opts.reap_for_s:.0f} s for {', '.join(sorted(waiting))} to answer, to reap its processes "
            f"(Ctrl-C twice gives up; `ftwiz --stop {self.core.run_id}` does it later)",
            "warn",
        )
        self.core.record.update(unreaped=sorted(waiting))
        deadline = self.core.clock() + opts.reap_for_s
        attempts: dict[str, Future] = {}
        next_try: dict[str, float] = {}
        while waiting and self.core.clock() < deadline and not self.core.abandon_reap:
            self.core.pump(0.2)
            now = self.core.clock()
            for name in sorted(waiting):
                future = attempts.get(name)
                if future is None:
                    if now >= next_try.get(name, 0):
                        attempts[name] = self.core.runners[name].submit(partial(self.reap_one, name))
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
                self.record_kill(name, report)
                self.core.record.update_node(name, reaped_at=time.time())
                if report.get("remaining"):
                    leftovers[name] = report["remaining"]
                killed = [k["pid"] for k in report.get("killed") or []]
                self.core.note(f"{name} answers again: reaped {len(killed)} leftover process(es) {killed}" if killed else f"{name} answers again: nothing of the run was left there")
        if waiting:
            self.core.note(f"gave up waiting for {', '.join(sorted(waiting))}: run `ftwiz --stop {self.core.run_id}` once it is back", "error")
        self.core.record.update(unreaped=sorted(waiting))
        return sorted(waiting)

    def reap_one(self, name: str) -> dict:
        """(runner thread) One attempt to stop the run on an unreachable node: SSH, else its agent."""
        runner = self.core.runners[name]
        try:
            return runner.kill(self.core.options.stop_grace_s, fresh=True, connect_timeout=self.core.options.reap_connect_timeout_s)
        except NodeGone as exc:
            return _gone_report(exc)
        except Exception as ssh_exc:
            report = agent_stop(self.core.config, name, self.core.run_id)
            if report is None:
                raise ssh_exc
            return report


def _gone_report(exc: NodeGone) -> dict[str, Any]:
    """A kill report for a node whose allocation ended: nothing killed by ftwiz, nothing left (``gone`` says why)."""
    return {"killed": [], "remaining": [], "gone": str(exc)}
