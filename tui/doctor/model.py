"""The doctor's data: a log line with its place and time, a finding, and a diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Diagnosis", "Evidence", "Finding", "ReadLine"]


@dataclass(frozen=True)
class ReadLine:
    """One line of one log file, with the node and rank it came from and its time when known."""

    file: str
    """The file's name as given (``node1.log``)."""
    line: int
    """1-based line number in that file."""
    node: str | None
    """The node (``node/rank |`` prefix, else the file name ``NODE.log``), or None."""
    rank: int | None
    """The global rank (``node/3 |`` or ``[rank3]:``), None for torchrun's own lines."""
    text: str
    """The line without its node/rank prefixes."""
    time: float | None
    """Unix seconds: the line's own timestamp, else the next one below it in the file (else the file's last write)."""
    order: int = 0
    """Position among all lines read (ties in time keep file order)."""


@dataclass(frozen=True)
class Evidence:
    """A line quoted as evidence: file, 1-based line number and text."""

    file: str
    line: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text}


@dataclass
class Finding:
    """A line (or traceback) that points to a cause."""

    cause: str
    weight: int
    echo: bool
    where: ReadLine
    extra: list[ReadLine] = field(default_factory=list)
    """More lines of the same finding (a traceback's frames and exception)."""
    detail: str = ""
    """What was found in words (``ValueError at train.py:12``)."""
    source: str = ""
    fix: str = ""
    """The fix this line calls for in particular (a signature's own, ftwiz's own error line's), or ``""``."""


@dataclass
class Diagnosis:
    """One likely cause of the failure, with its evidence and the fix (the ``--json`` item)."""

    cause: str
    node: str | None
    rank: int | None
    evidence: list[Evidence]
    explanation: str
    fix: str
    confirmed: bool | None = None
    """For ``oom.host``: True when the kernel's OOM record of the pid was found, False when looked for and absent."""
    echo: bool = False
    """True when this is demoted as the echo of another rank's failure."""
    time: float | None = None
    detail: str = ""
    """What was found in words (``ValueError: ... at train.py:27 in step``), for computed fixes."""
    own_fix: bool = False
    """True when ``fix`` is the evidence's own (a signature's or ftwiz's error line's): no computed fix replaces it."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cause": self.cause, "node": self.node, "rank": self.rank,
                               "evidence": [e.as_dict() for e in self.evidence],
                               "explanation": self.explanation, "fix": self.fix}
        if self.confirmed is not None:
            out["confirmed"] = self.confirmed
        if self.echo:
            out["echo"] = True
        return out
