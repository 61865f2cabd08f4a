"""Who failed and what they said: torchrun's failure summaries, stack dumps and each node's recent lines.

:class:`FailureTracker` sees every log line of a run and answers, at the end, which node and rank to
blame and which lines to show. torchrun prints, for a failed worker group, a summary whose
"Root Cause (first observed failure)" block names the global rank and its exit code (negative for a
signal); a worker killed by a signal other than our own TERM/INT is the cause, the others merely
lost their peers. The lines are read by :mod:`shared.torchrun_failures`, the parser ``--why`` uses too.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Iterable, Optional

from shared.torchrun_failures import SIGNALS, is_stack_dump, root_cause_rank, summary_exit, worker_failed

__all__ = ["PEER_LOST", "FailureTracker", "describe_exit"]

PEER_LOST = re.compile(r"(?:closed|reset) by (?:remote )?peer|remote (?:worker|process|peer) (?:crash|exit|died|has)|"
                       r"Broken pipe|peer (?:has )?(?:closed|disconnected|exited)", re.IGNORECASE)
"""An error line that says a rank's peer went away (gloo's "Connection closed by peer … typically caused by a remote
worker crashing", "Connection reset by peer", a broken pipe): the echo of another rank's failure, not a cause."""


def describe_exit(code: Optional[str]) -> str:
    """A node's ending (as the node helper reports it) in words."""
    if code is None:
        return "still running"
    if code == "gone":
        return "ended by a signal (no exit code)"
    if code == "stopped":
        return "stopped by ftwiz"
    if code == "missing":
        return "never started (no log on the node)"
    try:
        value = int(code)
    except ValueError:
        return f"ended ({code})"
    if value > 128 and value - 128 in SIGNALS:
        return f"exited with code {value} ({SIGNALS[value - 128]})"
    return f"exited with code {value}"


class FailureTracker:
    """Feed it every line (:meth:`observe`); ask it whom to blame (:meth:`attribute`, :meth:`last_lines`)."""

    def __init__(self, nodes: Iterable[str], *, keep: int = 200) -> None:
        self.tails: dict[str, deque] = {n: deque(maxlen=keep) for n in nodes}
        """Per node: recent ``(rank, shown line)``, protocol chatter left out."""
        self.root_causes: list[dict[str, Any]] = []
        """torchrun's root causes as seen: node, rank, local_rank, exitcode, order."""
        self.dumped: set[int] = set()
        """Ranks that printed a stack dump since :meth:`reset_dumps`."""
        self._pending: dict[str, dict[str, Any]] = {}
        self._in_root: dict[str, bool] = {}

    def observe(
        self, node: str, rank: Optional[int], text: str, shown: str, *, chatter: bool, pid_ranks: Optional[dict[int, int]] = None
    ) -> Optional[dict[str, Any]]:
        """One line from ``node`` (``rank`` None for torchrun's own); ``chatter`` lines are not kept.

        Returns the worker failure when this is torchrun's "failed (exitcode: N) local_rank: L (pid: P)"
        line, the earliest sign that a rank died (torchrun's summary comes only after its shutdown);
        ``pid_ranks`` (pid → global rank, from the ``started`` lines) names the rank.
        """
        if not chatter:
            self.tails.setdefault(node, deque(maxlen=200)).append((rank, shown))
        if rank is not None:
            if is_stack_dump(text):
                self.dumped.add(rank)
            return None
        failed = worker_failed(text)
        if failed is not None:
            entry = {"node": node, "rank": (pid_ranks or {}).get(failed.pid), "local_rank": failed.local_rank, "pid": failed.pid,
                     "exitcode": failed.exitcode, "order": len(self.root_causes)}
            self.root_causes.append(entry)
            return entry
        self._root_cause(node, text)
        return None

    def reset_dumps(self) -> None:
        """Forget earlier stack dumps (before sending SIGUSR1)."""
        self.dumped.clear()

    def _root_cause(self, node: str, text: str) -> None:
        if text.startswith("Root Cause"):
            self._in_root[node] = True
            return
        if text.startswith("Failures:") or text.startswith("====="):
            self._in_root[node] = False
            return
        ranks = root_cause_rank(text)
        if ranks is not None and self._in_root.get(node):
            self._pending[node] = {"node": node, "rank": ranks[0], "local_rank": ranks[1]}
            return
        ended = summary_exit(text) if node in self._pending else None
        if ended is not None:
            entry = self._pending.pop(node)
            entry["exitcode"] = ended.exitcode
            entry["order"] = len(self.root_causes)
            self.root_causes.append(entry)

    def attribute(
        self,
        trigger_node: Optional[str],
        trigger_rank: Optional[int],
        *,
        rank_nodes: dict[int, str],
        errors: Iterable[tuple[str, Optional[int], str]] = (),
    ) -> tuple[Optional[str], Optional[int]]:
        """The node and rank to blame: a given rank; else a worker killed by a signal from outside; else the first
        failure that is not an echo of a lost peer; else the first failure.

        Peers echo a rank's death: gloo/NCCL abort them (SIGABRT), or they raise "Connection closed by peer" — and
        their torchrun may report before the dead rank's (the nodes' logs race over their links). So a cause is
        ranked: 0 killed by a signal from outside (SIGKILL, SIGSEGV, ...), 1 failed on its own, 2 failed with an
        error line that says its peer went away, 3 aborted; then the trigger node (the first torchrun to end),
        then the order seen.
        """
        if trigger_rank is not None:
            return rank_nodes.get(trigger_rank, trigger_node), trigger_rank
        errors = list(errors)
        echoes = {(node, rank) for node, rank, message in errors if PEER_LOST.search(message)}

        def kind(cause: dict[str, Any]) -> int:
            code = cause.get("exitcode", 0)
            if code == -6:
                return 3
            if code < 0 and code not in (-15, -2):
                return 0
            return 2 if (cause["node"], cause["rank"]) in echoes else 1

        causes = sorted((c for c in self.root_causes if c.get("rank") is not None),
                        key=lambda c: (kind(c), c["node"] != trigger_node, c["order"]))
        if causes:
            return causes[0]["node"], causes[0]["rank"]
        mine = sorted(errors, key=lambda e: ((e[0], e[1]) in echoes, e[0] != trigger_node))
        for node, rank, _message in mine:
            if trigger_node is None or node == trigger_node or (node, rank) not in echoes:
                return node, rank
        return trigger_node, None

    def last_lines(self, node: Optional[str], rank: Optional[int], count: int) -> list[str]:
        """The failed rank's own last lines plus torchrun's on that node (its summary names the signal)."""
        if node is None:
            return []
        lines = [shown for r, shown in self.tails.get(node, []) if rank is None or r in (rank, None)]
        return lines[-count:]
