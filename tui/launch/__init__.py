"""The launcher: torchrun on every node over SSH, live logs and progress, stop-all on any failure.

- :class:`tui.launch.run.Run` — start (:meth:`~tui.launch.run.Run.launch`), watch
  (:meth:`~tui.launch.run.Run.supervise`), subscribe to events, stop, detach, attach.
- :mod:`tui.launch.commands` — ``ftwiz --launch/--attach/--stop`` (checklist first, confirmation,
  headless output, signals).
- :mod:`tui.launch.plan` — the per-node torchrun command (pure).
- :mod:`tui.launch.progress` / :mod:`tui.launch.events` — the progress model and the observer events.

Importing this package imports neither paramiko nor torch.
"""

from tui.launch.events import (
    Event,
    LogLine,
    NodeStateChanged,
    Observer,
    ProgressChanged,
    RunFinished,
    RunNodeState,
    RunNote,
    RunResult,
)
from tui.launch.progress import ProgressSnapshot, format_progress
from tui.launch.run import LaunchError, Run, RunOptions

__all__ = [
    "Event",
    "LaunchError",
    "LogLine",
    "RunNodeState",
    "NodeStateChanged",
    "Observer",
    "ProgressChanged",
    "ProgressSnapshot",
    "Run",
    "RunFinished",
    "RunNote",
    "RunOptions",
    "RunResult",
    "format_progress",
]
