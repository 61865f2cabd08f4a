"""The line protocol between the workloads and the controller: see ``shared/protocol.py``.

The definition lives in ``shared/protocol.py`` (pure, the controller parses with it); the launcher ships it beside
the workloads under the same name (``tui.launch.support.SHIPPED_SHARED``). :func:`emit` (the only I/O) lives here.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, TextIO

from shared.protocol import KINDS, PREFIX_KEY, format_line, make_record, parse_line

__all__ = ["KINDS", "PREFIX_KEY", "emit", "format_line", "parse_line"]


def emit(kind: str, *, stream: Optional[TextIO] = None, **fields: Any) -> None:
    """Print one protocol line, the record of ``kind`` with ``fields`` (:func:`shared.protocol.make_record`: a field
    the kind does not have is a ValueError), to ``stream`` (stdout) in a single write and flush it."""
    out = stream or sys.stdout
    out.write(format_line(make_record(kind, **fields)) + "\n")
    out.flush()
