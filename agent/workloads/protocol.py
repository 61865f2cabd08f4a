"""The line protocol between the workloads and the controller: see ``shared/protocol.py``.

The definition lives in ``shared/protocol.py`` (pure, the controller parses with it). On a node the
workloads run without the ``shared`` package, so the launcher ships a copy of that file beside them
as ``ftwiz_workloads/_wire.py``; in the repository this module imports the original. :func:`emit`
(the only I/O) lives here.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, TextIO

try:  # on a node: the copy shipped beside the workloads
    from ._wire import KINDS, PREFIX_KEY, format_line, parse_line  # type: ignore[import-not-found]
except ImportError:  # in the repository (tests, the agent's own imports)
    from shared.protocol import KINDS, PREFIX_KEY, format_line, parse_line

__all__ = ["KINDS", "PREFIX_KEY", "emit", "format_line", "parse_line"]


def emit(kind: str, *, stream: Optional[TextIO] = None, **fields: Any) -> None:
    """Print one protocol line to ``stream`` (stdout) in a single write and flush it."""
    out = stream or sys.stdout
    out.write(format_line(kind, **fields) + "\n")
    out.flush()
