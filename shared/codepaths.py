"""Where the user's code ran and where it lives: paths into the shipped copy mapped back to ``code_dir``.

For ``workload = "command"`` ftwiz copies ``[job].code_dir`` to ``<rundir>/code/`` on every node and runs it
from there, so a traceback names ``/home/ai/ftwiz/runs/<run id>/code/train.py``, a file the user never
edits. :class:`CodePathMap` rewrites such paths to ``<code_dir>/train.py`` on the operator's machine. Pure
(no I/O): the launcher maps the lines it shows, and ``ftwiz --why`` can build the same map from ``run.json``
(:meth:`CodePathMap.from_record`: every node's ``rundir`` and ``code.root``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

__all__ = ["CODE_SUBDIR", "LIBRARY_MARKERS", "CodePathMap", "code_location", "is_library", "shipped_code_dir"]

#: The shipped code's directory inside a node's run directory (the node-side runner has its own copy of the name).
CODE_SUBDIR = "code"


#: Fragments of a frame's file name that mark it as not the user's own code (installed packages, the
#: interpreter's library, torch, code run from a string).
LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen", "/torch/", "<string>")


def is_library(file: str) -> bool:
    """Whether a traceback frame's file is a library's, not the user's own code."""
    return any(marker in file for marker in LIBRARY_MARKERS)


def code_location(file: str, line: int, func: str = "") -> str:
    """``train.py:27 in check_batch``: one way to name where code raised, on the rank and in the doctor."""
    return f"{file}:{line}" + (f" in {func}" if func else "")


def shipped_code_dir(rundir: str) -> str:
    """``<rundir>/code``: where a node runs the shipped copy of ``code_dir``."""
    return f"{rundir.rstrip('/')}/{CODE_SUBDIR}"


@dataclass(frozen=True)
class CodePathMap:
    """Shipped copies (one per node) → the user's ``code_dir``; maps ``<shipped>/x.py`` to ``<code_dir>/x.py``."""

    shipped: tuple[str, ...]
    """The shipped copies' directories on the nodes (``<rundir>/code``), longest first."""
    code_dir: Optional[str]
    """The user's code dir on this machine (absolute); None when nothing was shipped (``code_dir = ""``)."""

    @classmethod
    def for_run(cls, rundirs: Iterable[Optional[str]], code_dir: Optional[str]) -> "CodePathMap":
        """The map for a run: each node's run directory and the code dir that was shipped (None: not shipped)."""
        if not code_dir:
            return cls((), None)
        dirs = {shipped_code_dir(r) for r in rundirs if r}
        return cls(tuple(sorted(dirs, key=lambda d: (-len(d), d))), code_dir.rstrip("/") or "/")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "CodePathMap":
        """The map from a ``run.json`` document (``nodes[*].rundir``, ``code.root``)."""
        nodes = record.get("nodes") or {}
        code = record.get("code") or {}
        rundirs = [n.get("rundir") for n in nodes.values() if isinstance(n, Mapping)]
        return cls.for_run(rundirs, code.get("root") if isinstance(code, Mapping) else None)

    def map(self, text: str) -> str:
        """``text`` with every path into a shipped copy rewritten into ``code_dir`` (other text unchanged)."""
        if self.code_dir is None:
            return text
        for shipped in self.shipped:
            if shipped in text:  # the directory itself or a path under it, never a longer name (".../code2")
                text = re.sub(re.escape(shipped) + r"(?![\w.-])", lambda _: self.code_dir or "", text)
        return text
