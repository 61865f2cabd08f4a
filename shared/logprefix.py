"""The prefixes a training log line carries, each written and read here.

* **torchrun's rank prefix**: with ``--tee``/``--log-line-prefix-template`` defaults, torchrun puts ``[rank3]:``
  (``[default3]:`` before torch 2.2; an MPI-style ``[1] `` may come before it) in front of every line a worker
  prints. :func:`split_rank` takes it off.
* **ftwiz's node prefix**: the controller keeps each node's lines in ``runs/<id>/<node>.log`` as
  ``node1/3 | text`` (``node1/- | text`` for torchrun's own lines). :func:`node_line` writes it,
  :func:`split_node_line` reads it back (the failure doctor reads those files).
"""

from __future__ import annotations

import re  # and no typing: the node helper imports this module on every call (tui/launch/nodecode.py)

__all__ = ["node_line", "rank_prefix", "split_node_line", "split_rank"]

_RANK_PREFIX = re.compile(r"^(?:\[\d+\] )?\[(?:rank|default)(?P<rank>\d+)\]: ?")
_NODE_PREFIX = re.compile(r"^(?P<node>[A-Za-z0-9._-]+)/(?P<rank>-|\d+) \| ?")


def rank_prefix(rank: int) -> str:
    """``[rank3]:``: what torchrun writes before a worker's line."""
    return f"[rank{rank}]:"


def split_rank(line: str) -> tuple[int | None, str]:
    """``"[rank3]:text"`` → ``(3, "text")``; a line without the prefix → ``(None, line)``.

    One space after the colon goes with the prefix (``[rank0]: Traceback ...``, as torch's own error
    handler writes it)."""
    match = _RANK_PREFIX.match(line)
    if not match:
        return None, line
    return int(match.group("rank")), line[match.end():]


def node_line(node: str, rank: int | None, text: str) -> str:
    """``node1/3 | text``: a line as the controller logs and shows it (``-`` for a line of no rank)."""
    return f"{node}/{'-' if rank is None else rank} | {text}"


def split_node_line(line: str) -> tuple[str, int | None, str] | None:
    """``"node1/3 | text"`` → ``("node1", 3, "text")``; None for a line without ftwiz's node prefix.

    ``"node1/- |"`` (the blank after the bar trimmed by an editor) is an empty line of torchrun's."""
    match = _NODE_PREFIX.match(line)
    if not match:
        return None
    rank = match.group("rank")
    return match.group("node"), None if rank == "-" else int(rank), line[match.end():]
