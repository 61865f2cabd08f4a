"""What a run tells its observers (the headless printer, the TUI).

Subscribe with :meth:`tui.launch.run.Run.subscribe`; every callback gets one of these frozen
dataclasses. Callbacks run on the run's worker threads: keep them short, and in Textual hand the
event to the UI thread with ``app.call_from_thread``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Optional, Union

from shared.protocol import Record
from tui.launch.progress import ProgressSnapshot
from tui.runs.status import RunStatus

__all__ = [
    "Event",
    "LogLine",
    "RunNodeState",
    "NodeStateChanged",
    "Observer",
    "ProgressChanged",
    "RunFinished",
    "RunNote",
    "RunResult",
]


class RunNodeState(str, Enum):
    """Where one node's part of the run stands."""

    CONNECTING = "connecting"
    PREPARING = "preparing"
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    UNREACHABLE = "unreachable"
    RECONNECTING = "reconnecting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True)
class LogLine:
    """One line of a node's log (worker lines carry their global rank)."""

    node: str
    """Node name."""
    rank: Optional[int]
    """Global rank of the worker that printed it; None for torchrun's own lines."""
    text: str
    """The line without the torchrun rank prefix."""
    time: float
    """Unix time the controller received it."""
    record: Optional[Record] = None
    """The protocol record in ``text`` (a :mod:`shared.protocol` dataclass, one per kind), parsed once where the line
    entered the controller (:func:`tui.launch.progress.parse_protocol`); None for any other line. Observers read it,
    never parse ``text`` again."""

    @property
    def prefix(self) -> str:
        """``node/rank`` (``node/-`` for torchrun's own lines): the key of ``shared.logprefix.node_line``."""
        return f"{self.node}/{'-' if self.rank is None else self.rank}"


@dataclass(frozen=True)
class ProgressChanged:
    """The progress model moved (a progress, checkpoint, allreduce or done line)."""

    progress: ProgressSnapshot


@dataclass(frozen=True)
class NodeStateChanged:
    """A node changed state."""

    node: str
    state: RunNodeState
    detail: str = ""


@dataclass(frozen=True)
class RunNote:
    """Something the operator should read: a trigger fired, a stop step, a reap."""

    text: str
    level: str = "info"
    """``info``, ``warn`` or ``error``."""


@dataclass
class RunResult:
    """How a run ended (also stored in ``run.json``)."""

    run_id: str
    status: RunStatus
    """``succeeded``, ``failed``, ``stopped`` (user), ``detached`` or ``launch_failed``."""
    exit_code: int
    """What the controller exits with: 0 only when the job succeeded (or was detached)."""
    reason: str = ""
    """Why it ended, in a sentence."""
    failed_node: Optional[str] = None
    failed_rank: Optional[int] = None
    last_lines: list[str] = field(default_factory=list)
    """The failed node's (or rank's) last log lines."""
    leftovers: dict[str, list[int]] = field(default_factory=dict)
    """Pids that survived the stop, per node."""
    unreaped: list[str] = field(default_factory=list)
    """Nodes that never answered again to have their processes reaped."""
    stalled_ranks: list[int] = field(default_factory=list)
    """Ranks that did not move before a stall stop."""


@dataclass(frozen=True)
class RunFinished:
    """The run is over (or detached); no more events follow."""

    result: RunResult


Event = Union[LogLine, ProgressChanged, NodeStateChanged, RunNote, RunFinished]
Observer = Callable[[Event], None]
