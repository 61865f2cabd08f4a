"""What a node's runner tells the supervisor, typed: one dataclass per kind of message.

Runners post these to the run's outbox from their own threads; the driver hands them to the
supervisor core in order. A node's ending is parsed once, here, from the node helper's ``X`` frame
(:meth:`NodeEnding.parse`), so every later decision switches on a kind, never on a string.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Union

from shared import nodewire

__all__ = [
    "AllocationEnded",
    "BackendNote",
    "EndingKind",
    "NodeEnded",
    "NodeEnding",
    "NodeLine",
    "NodeLost",
    "NodePgid",
    "RankSample",
    "RankSamples",
    "RunnerMessage",
]

_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


class EndingKind(str, Enum):
    """How torchrun ended on a node."""

    EXITED = "exited"
    """With an exit code (see :attr:`NodeEnding.code`)."""
    SIGNALLED = "signalled"
    """Its process group vanished without an exit code: someone else signalled it."""
    STOPPED = "stopped"
    """An ftwiz stop ended it (``<node>.stopped`` was left on the node)."""
    MISSING = "missing"
    """It never started (no log on the node)."""
    ABORTED = "aborted"
    """The launch exchange ended before ``go``."""


@dataclass(frozen=True)
class NodeEnding:
    """One node's ending, parsed once from the helper's ``X`` frame."""

    kind: EndingKind
    code: Optional[int] = None
    raw: str = ""

    @classmethod
    def parse(cls, text: str) -> "NodeEnding":
        """An ``X`` frame's body, an exit code (``"0"``, ``"137"``) or a word of :data:`shared.nodewire.ENDINGS`
        (``"gone"``, ``"stopped"``, ...), as an ending."""
        raw = text.strip()
        named = {nodewire.GONE: EndingKind.SIGNALLED, nodewire.STOPPED: EndingKind.STOPPED, nodewire.MISSING: EndingKind.MISSING,
                 nodewire.ABORTED: EndingKind.ABORTED, nodewire.BAD_PAYLOAD: EndingKind.ABORTED}
        if raw in named:
            return cls(named[raw], None, raw)
        try:
            return cls(EndingKind.EXITED, int(raw), raw)
        except ValueError:
            return cls(EndingKind.SIGNALLED, None, raw)

    @property
    def ok(self) -> bool:
        """torchrun exited 0 on the node."""
        return self.kind is EndingKind.EXITED and self.code == 0

    @property
    def failed(self) -> bool:
        """An ending that fails the run (not 0, not an ftwiz stop)."""
        return not self.ok and self.kind is not EndingKind.STOPPED

    def describe(self) -> str:
        """In words, e.g. ``exited with code 137 (SIGKILL)``."""
        if self.kind is EndingKind.SIGNALLED:
            return "ended by a signal (no exit code)"
        if self.kind is EndingKind.STOPPED:
            return "stopped by ftwiz"
        if self.kind is EndingKind.MISSING:
            return "never started (no log on the node)"
        if self.kind is EndingKind.ABORTED:
            return f"was not started ({self.raw})"
        assert self.code is not None
        if self.code > 128 and self.code - 128 in _SIGNALS:
            return f"exited with code {self.code} ({_SIGNALS[self.code - 128]})"
        return f"exited with code {self.code}"


@dataclass(frozen=True)
class NodeLine:
    """One line of the node's log (torchrun's ``[rankN]:`` prefix still on it)."""

    node: str
    text: str


@dataclass(frozen=True)
class NodePgid:
    """torchrun's process group id on the node, and its leader's start time (``/proc/PID/stat`` field 22)."""

    node: str
    pgid: int
    started: Optional[int] = None
    """None from a node whose start script predates start times: such a group is never signalled as a group."""


@dataclass(frozen=True)
class NodeEnded:
    """torchrun ended on the node."""

    node: str
    ending: NodeEnding


@dataclass(frozen=True)
class NodeLost:
    """The log stream broke without an ending (the node may still run)."""

    node: str
    reason: str


@dataclass(frozen=True)
class RankSample:
    """One worker process as the node helper saw it at one tick."""

    rank: int
    pid: int
    state: str
    """The kernel's process state letter (``R`` running, ``S`` sleeping, ``D`` disk, ``T`` stopped, ...)."""
    cpu_ticks: int
    """User + system CPU time in clock ticks."""
    io_bytes: int
    """Bytes read and written through syscalls (``rchar + wchar``: files, pipes and sockets: a download moves it)."""
    run_ns: Optional[int] = None
    """Its main thread's time on a CPU (``/proc/PID/schedstat``), when the node could tell."""
    wait_ns: Optional[int] = None
    """Its main thread's time runnable but waiting for a CPU (a busy host, a cgroup CPU quota)."""


@dataclass(frozen=True)
class RankSamples:
    """Every worker of the run on the node, sampled once (the node helper does it every tick)."""

    node: str
    samples: tuple[RankSample, ...]


@dataclass(frozen=True)
class BackendNote:
    """What the backend saw outside the nodes' streams (a Slurm node drained), for the operator."""

    level: str
    text: str


@dataclass(frozen=True)
class AllocationEnded:
    """The backend ended the run's nodes (Slurm's time limit, a node failure): nothing of the run is left."""

    reason: str


RunnerMessage = Union[NodeLine, NodePgid, NodeEnded, NodeLost, RankSamples, BackendNote, AllocationEnded]
"""Anything a runner (or the backend's watcher) posts to the outbox."""
