"""App-wide messages of the wizard (a widget's own messages live in that widget)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

__all__ = ["ClusterUpdated", "ConfigChanged", "RunEventArrived", "RunUpdated"]


@dataclass
class ClusterUpdated(Message):
    """A poll of every agent finished; ``app.cluster`` holds the new picture."""

    polls: int
    """How many polls have completed so far."""


@dataclass
class ConfigChanged(Message):
    """``app.config`` was replaced (a form was applied, a node added or removed)."""

    section: str
    """Which part changed: ``nodes``, ``job``, ``cluster`` or ``all``."""


@dataclass
class RunUpdated(Message):
    """The launch session changed: progress, a node's state, a note, or the run finished."""

    finished: bool = False
    """The run is over."""


@dataclass
class RunEventArrived(Message):
    """One launcher event (``LogLine``, ``ProgressChanged``, ``RunFinished``, ...), posted from the run's thread.

    The app posts it to itself with the thread-safe ``post_message`` and folds it into ``app.launch`` on the UI
    thread.
    """

    event: Any
    """The event as the launcher emitted it (:mod:`tui.launch.events`)."""
