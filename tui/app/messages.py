"""App-wide messages of the wizard (a widget's own messages live in that widget)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

__all__ = ["ClusterUpdated", "ConfigChanged", "RunUpdated"]


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
