"""Reading log files into :class:`LogLine` s: node and rank from the prefixes, time from the text.

Two shapes are understood: ftwiz's run logs (``node/rank | text``, ``-`` for torchrun's own lines) and
raw torchrun output (``[rank3]:text``; the node is then the file's name, ``NODE.log``). Times come from
the line itself: the workloads' protocol lines (``"time": <unix s>``), glog-style torch lines
(``E1122 06:12:24.825000``), torchrun's failure summary (``time : 2026-11-22_06:12:24``) and ISO
stamps; a line without one takes the next stamp below it in the same file (else the file's last write, or
its last stamp when that is later): it happened no later than that.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time as _time
from collections.abc import Iterable
from pathlib import Path

from .model import LogLine

__all__ = ["node_of_file", "parse_time", "read_log", "read_logs"]

_FTWIZ_PREFIX = re.compile(r"^(?P<node>[A-Za-z0-9._-]+)/(?P<rank>-|\d+) \| ?(?P<text>.*)$")
_RANK_PREFIX = re.compile(r"^(?:\[\d+\] )?\[(?:rank|default)(?P<rank>\d+)\]: ?(?P<text>.*)$")
_GLOG = re.compile(r"(?:^|[\s\[])[EWIF](?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?")
_ISO = re.compile(r"(?P<y>20\d{2})-(?P<mo>\d{2})-(?P<d>\d{2})[ T_](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:[.,](?P<f>\d{1,9}))?")
_PROTOCOL_TIME = re.compile(r'"time"\s*:\s*(?P<t>\d{9,11}(?:\.\d+)?)')
_MAX_TEXT = 2000  # a tqdm line can be megabytes of carriage returns


def node_of_file(path: Path) -> str | None:
    """``node1.log`` → ``node1``; other names, and ``_backend.log`` (a backend's own lines, e.g. ``_slurm.log``),
    give no node."""
    return path.stem if path.suffix == ".log" and path.stem and not path.stem.startswith("_") else None


def parse_time(text: str, *, year: int) -> float | None:
    """Unix seconds of the timestamp in ``text`` (local time for clock stamps), or None."""
    if '"ftwiz"' in text:
        match = _PROTOCOL_TIME.search(text)
        if match:
            return float(match.group("t"))
    match = _ISO.search(text)
    if match:
        return _local(int(match.group("y")), match)
    match = _GLOG.search(text)
    if match:
        return _local(year, match)
    return None


def _local(year: int, match: re.Match[str]) -> float | None:
    fraction = match.group("f") or "0"
    try:
        moment = _dt.datetime(year, int(match.group("mo")), int(match.group("d")), int(match.group("h")),
                              int(match.group("mi")), int(match.group("s")))
    except ValueError:
        return None
    return _time.mktime(moment.timetuple()) + float("0." + fraction)


def read_log(path: Path, *, name: str | None = None, start_order: int = 0) -> list[LogLine]:
    """Every line of ``path`` as a :class:`LogLine` (``name``: how evidence names the file)."""
    shown = name or path.name
    default_node = node_of_file(path)
    raw = path.read_text(encoding="utf-8", errors="replace")
    year = _dt.date.fromtimestamp(path.stat().st_mtime).year
    parsed = []
    for full in raw.splitlines():
        node, rank, text = _split(full, default_node)
        text = text.rsplit("\r", 1)[-1] if "\r" in text else text
        text = text[:_MAX_TEXT]
        stamp = parse_time(text, year=year)
        if stamp is not None:
            year = _dt.date.fromtimestamp(stamp).year
        parsed.append((node, rank, text, stamp))
    # A line without a stamp happened after the stamps above it and before the next one: take the next
    # (else the file's last write) so a late traceback is not dated at an early warning.
    last_write = path.stat().st_mtime
    times: list[float | None] = []
    upcoming: float | None = None
    for _node, _rank, _text, stamp in reversed(parsed):
        upcoming = stamp if stamp is not None else upcoming
        times.append(upcoming)
    times.reverse()
    stamped = [t for *_rest, t in parsed if t is not None]
    tail = max(last_write, stamped[-1]) if stamped else None
    return [LogLine(shown, number, node, rank, text, stamp if stamp is not None else (times[number - 1] or tail), start_order + number)
            for number, (node, rank, text, stamp) in enumerate(parsed, 1)]


def read_logs(paths: Iterable[Path]) -> list[LogLine]:
    """All lines of all files, each file's lines in order (files one after another)."""
    out: list[LogLine] = []
    for path in paths:
        out.extend(read_log(path, start_order=len(out) + 1))
    return out


def _split(full: str, default_node: str | None) -> tuple[str | None, int | None, str]:
    node, rank, text = default_node, None, full
    match = _FTWIZ_PREFIX.match(full)
    if match:
        node, text = match.group("node"), match.group("text")
        rank = None if match.group("rank") == "-" else int(match.group("rank"))
    inner = _RANK_PREFIX.match(text)
    if inner:
        rank, text = int(inner.group("rank")), inner.group("text")
    return node, rank, text


def protocol(text: str) -> dict | None:
    """The workloads' protocol object on this line (``{"ftwiz": kind, ...}``), or None."""
    stripped = text.strip()
    if not stripped.startswith("{") or '"ftwiz"' not in stripped:
        return None
    try:
        obj = json.loads(stripped)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
