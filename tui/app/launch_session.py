"""The run the Launch step shows: the launcher's events folded into what the screen draws.

The launcher (:mod:`tui.launch`) does the work — SSH, torchrun, stop-all, progress parsing; this
class only keeps its events for display (log lines per node, node states, loss and tokens/s
histories) and relays start/stop/resume to it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from shared.protocol import Error, Note, Started
from tui.launch.events import LogLine, NodeStateChanged, ProgressChanged, RunFinished, RunNote, RunResult

__all__ = ["LaunchSession"]

KEEP_LINES = 5000
"""Lines kept in memory per node for re-filtering (the full log is on disk)."""


@dataclass
class LaunchSession:
    """One run at a time; ``apply`` must be called on the UI thread."""

    run: Any = None
    """The launcher's run object while one is going (or finished and kept for its result)."""
    lines: dict[str, deque] = field(default_factory=dict)
    """Per node: ``(rank, text)`` lines, the last :data:`KEEP_LINES`."""
    unseen: dict[str, list] = field(default_factory=dict)
    """Per node: lines not yet written to the screen."""
    node_states: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per node: ``(state, detail)`` from the launcher."""
    snapshot: Any = None
    """The launcher's latest ``ProgressSnapshot``."""
    losses: list[float] = field(default_factory=list)
    """Loss per progress update, oldest first."""
    tokens_per_s: list[float] = field(default_factory=list)
    """Tokens/s per progress update, oldest first."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """``(level, text)`` notes from the launcher (triggers, stop steps, reaps)."""
    result: Optional[RunResult] = None
    """How the run ended; None while it runs (or before any run)."""
    run_id: Optional[str] = None
    """The run's id once known."""
    error: Optional[str] = None
    """Why the run could not be started."""

    @property
    def active(self) -> bool:
        """A run was started and has not finished."""
        return self.run is not None and self.result is None

    def reset(self, nodes: list[str]) -> None:
        """Forget the previous run; one empty log per node."""
        self.run, self.result, self.snapshot, self.run_id, self.error = None, None, None, None, None
        self.lines = {n: deque(maxlen=KEEP_LINES) for n in nodes}
        self.unseen = {n: [] for n in nodes}
        self.node_states = dict.fromkeys(nodes, ("waiting", ""))
        self.losses, self.tokens_per_s, self.notes = [], [], []

    def apply(self, event: Any) -> None:
        """Fold one launcher event in."""
        if isinstance(event, LogLine):
            text = _readable(event)
            if text is None:
                return  # a protocol line: it is drawn as progress, not as log text
            entry = (event.rank, text)
            self.lines.setdefault(event.node, deque(maxlen=KEEP_LINES)).append(entry)
            self.unseen.setdefault(event.node, []).append(entry)
        elif isinstance(event, ProgressChanged):
            snap = event.progress
            previous = self.snapshot
            self.snapshot = snap
            if snap.step is not None and (previous is None or previous.step != snap.step):
                if snap.loss is not None:
                    self.losses.append(snap.loss)
                if snap.tokens_per_s is not None:
                    self.tokens_per_s.append(snap.tokens_per_s)
        elif isinstance(event, NodeStateChanged):
            self.node_states[event.node] = (getattr(event.state, "value", str(event.state)), event.detail)
        elif isinstance(event, RunNote):
            self.notes.append((event.level, event.text))
        elif isinstance(event, RunFinished):
            self.result = event.result
            self.run_id = event.result.run_id

    def take_unseen(self) -> dict[str, list]:
        """Lines that arrived since the last call, per node."""
        out = {node: lines for node, lines in self.unseen.items() if lines}
        for node in out:
            self.unseen[node] = []
        return out


Observer = Callable[[Any], None]


def _readable(line: LogLine) -> Optional[str]:
    """A log line as the headless printer shows it: protocol lines summarised or hidden (they are progress)."""
    record = line.record
    if record is None:
        return line.text
    if isinstance(record, Started):
        return (f"started: rank {record.rank} of {record.world_size} (local {record.local_rank}, "
                f"pid {record.pid}, {record.backend})")
    if isinstance(record, (Note, Error)):
        return f"{record.KIND}: {record.message}"
    return None
