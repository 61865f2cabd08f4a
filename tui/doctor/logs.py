"""Reading log files into :class:`ReadLine` s: node and rank from the prefixes, time from the text.

Two shapes are understood: ftwiz's run logs (``node/rank | text``, ``-`` for torchrun's own lines) and
raw torchrun output (``[rank3]:text``; the node is then the file's name, ``NODE.log``). Times come from
the line itself: the workloads' protocol lines (``"time": <unix s>``), glog-style torch lines
(``E1122 06:12:24.825000``), torchrun's failure summary (``time : 2026-11-22_06:12:24``) and ISO
stamps; a line without one takes the next stamp below it in the same file (else the file's last write, or
its last stamp when that is later): it happened no later than that.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import itertools
import os
import re
import stat
import time as _time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from shared.doctor_signatures import is_normal
from shared.logprefix import split_node_line, split_rank

from .model import ReadLine

__all__ = ["NotARegularFile", "kept_lines", "node_of_file", "open_regular", "parse_time", "read_log", "read_logs"]

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


class NotARegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device, a directory): refused before any read."""


#: A line longer than this is cut (its head kept, or its tail when it is a ``\r`` progress bar).
_MAX_RAW = 64 * 1024
#: Read this much at a time; the words are looked for in a whole block at once.
_BLOCK = 4 * 1024 * 1024
#: Lines kept before and after a line that may matter, the file's first and last lines, and the cap.
_BEFORE, _AFTER, _HEAD, _TAIL, _MAX_KEPT = 30, 30, 50, 100, 100_000
#: The cheap test, on the lower-cased text: a line with one of these words may be evidence (or start a
#: traceback, or carry a protocol object). Every line a signature matches must hold one
#: (tests/doctor/test_corpus.py checks that on every corpus line); long words scan faster.
KEYWORDS: tuple[bytes, ...] = (
    b"error", b"errno", b"fail", b"exception", b"traceback", b"kill", b"memory", b"timeo", b"timed", b"abort", b"cancel",
    b"jobstate", b"in use", b"inuse", b"socket", b"af_inet", b"unable", b"cannot", b"peer", b"broken", b"exit", b"warn",
    b"fault", b"too old", b"insufficient", b"mismatch", b"compiled against", b"undefined", b"kernel image", b"space",
    b"quota", b"full", b"gated", b"identifier", b"connect", b"nan", b": inf", b"=inf", b"d inf", b"finite", b"unused",
    b"expects", b"fsdp", b"not found", b"valid", b"no such", b'started"', b'file "', b"signal", b"fatal", b"preempt",
    b"due to", b"overflow", b"minimum", b"rendezvous", b"terminat", b"assert", b"core dump", b"unrecogni", b"no module",
    b"bad_alloc", b"missing ranks", b"watchdog", b"couldn", b"offline", b"p2p", b"compiled without",
    b"ready only once", b"twice", b"did not receive", b"flatten", b"oom",
    b"restrict", b"authenticat", b"name resolution", b"not known", b"getaddrinfo", b"exhausted", b"ipc", b"retry count",
    b"not compiled", b"not compatible", b"glibc", b"require", b"max retries", b"import", b"sigbus", b"acsctl", b"ibv_",
    b"multi gpu", b"barrier", b"ip address of", b"loss_scale",
)
def open_regular(path: Path) -> int:
    """An fd open for reading on ``path``; :class:`NotARegularFile` for a FIFO, device or directory (never blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise NotARegularFile(f"{path} is {kind}, not a regular log file")
    return fd


def _cut(head: bytes, whole: bytes) -> bytes:
    """An over-long line cut to ``_MAX_RAW``: its tail when it is a ``\r`` progress bar (the last state shows), else its head."""
    tail = whole[-_MAX_RAW:]
    return tail if b"\r" in tail.rstrip(b"\r") else head


def _blocks(fh: BinaryIO) -> Iterator[list[bytes]]:
    """The file's lines, a block's worth at a time, without line ends and each cut to ``_MAX_RAW``."""
    carry = b""
    carry_head: bytes | None = None  # the head of an over-long line still being read
    while True:
        block = fh.read(_BLOCK)
        if not block:
            if carry or carry_head is not None:
                yield [_cut(carry_head if carry_head is not None else carry[:_MAX_RAW], carry).rstrip(b"\r")]
            return
        lines = (carry + block).split(b"\n")
        carry = lines.pop()
        if carry_head is not None and lines:
            lines[0] = _cut(carry_head, lines[0])
            carry_head = None
        if len(carry) > _MAX_RAW:
            carry_head = carry[:_MAX_RAW] if carry_head is None else carry_head
            carry = carry[-_MAX_RAW:]
        if lines and max(map(len, lines)) > _MAX_RAW:
            lines = [_cut(line[:_MAX_RAW], line) if len(line) > _MAX_RAW else line for line in lines]
        if b"\r" in block:
            lines = [line.rstrip(b"\r") for line in lines]
        if lines:
            yield lines


def _hits(low: bytes, offsets: list[int]) -> set[int]:
    """Indices of the lines (``offsets``: where each starts in ``low``) that hold one of :data:`KEYWORDS`."""
    found: set[int] = set()
    for word in KEYWORDS:
        at = low.find(word)
        while at != -1:
            index = bisect.bisect_right(offsets, at) - 1
            found.add(index)
            at = low.find(word, offsets[index + 1]) if index + 1 < len(offsets) else -1
    return found


def kept_lines(fh: BinaryIO) -> list[tuple[int, bytes]]:
    """``(line number, raw line)`` of the lines worth reading: windows around possible evidence, the head and tail.

    One pass in bounded memory: a line holding one of :data:`KEYWORDS` that is not a known-normal line
    (NCCL INFO, warnings) is kept with the ``_BEFORE`` lines above and the ``_AFTER`` below it; so are the
    file's first ``_HEAD`` and last ``_TAIL`` lines. Past ``_MAX_KEPT`` kept lines the first half stays
    and only the latest other half is kept.
    """
    head: list[tuple[int, bytes]] = []
    rest: deque[tuple[int, bytes]] = deque(maxlen=_MAX_KEPT // 2)
    before: deque[tuple[int, bytes]] = deque(maxlen=_BEFORE)  # the latest lines not kept, for a window that opens next
    tail: deque[tuple[int, bytes]] = deque(maxlen=_TAIL)
    after = 0  # lines still to keep below the last window's line
    done = 0  # lines in the blocks before this one

    def keep(item: tuple[int, bytes]) -> None:
        (head if len(head) < _MAX_KEPT // 2 else rest).append(item)

    for lines in _blocks(fh):
        offsets = [0, *itertools.accumulate(len(line) + 1 for line in lines)]
        hits = _hits(b"\n".join(lines).lower(), offsets)
        opening = sorted(i for i in hits if not is_normal(lines[i].decode("utf-8", errors="replace")))
        wanted: set[int] = set(range(min(after, len(lines))))
        wanted.update(range(max(0, _HEAD - done)))
        for i in opening:
            wanted.update(range(max(0, i - _BEFORE), min(len(lines), i + _AFTER + 1)))
        first_open = opening[0] if opening else None
        if first_open is not None and first_open < _BEFORE:
            for item in before:
                if item[0] > done + first_open - _BEFORE:
                    keep(item)
        before.clear()
        for i in sorted(wanted):
            if i < len(lines):
                keep((done + i + 1, lines[i]))
        for i in range(max(0, len(lines) - _BEFORE), len(lines)):
            if i not in wanted:
                before.append((done + i + 1, lines[i]))
        after = max(after - len(lines), (opening[-1] + _AFTER + 1 - len(lines)) if opening else 0, 0)
        tail.extend((done + i + 1, lines[i]) for i in range(max(0, len(lines) - _TAIL), len(lines)))
        done += len(lines)
    last = rest[-1][0] if rest else head[-1][0] if head else 0
    return [*head, *rest, *(item for item in tail if item[0] > last)]


def read_log(path: Path, *, name: str | None = None, start_order: int = 0) -> list[ReadLine]:
    """The lines of ``path`` worth reading (:func:`kept_lines`) as :class:`ReadLine` s, with their own numbers.

    ``name``: how evidence names the file. Streams the file once in bounded memory; invalid UTF-8 is
    replaced, over-long lines are cut. :class:`NotARegularFile` (an OSError) for a FIFO, device or directory.
    """
    shown = name or path.name
    default_node = node_of_file(path)
    with os.fdopen(open_regular(path), "rb") as fh:
        last_write = os.fstat(fh.fileno()).st_mtime
        kept = kept_lines(fh)
    year = _dt.date.fromtimestamp(last_write).year
    parsed = []
    for number, raw in kept:
        node, rank, text = _split(raw.decode("utf-8", errors="replace"), default_node)
        text = text.rsplit("\r", 1)[-1] if "\r" in text else text
        text = text[:_MAX_TEXT]
        stamp = parse_time(text, year=year)
        if stamp is not None:
            year = _dt.date.fromtimestamp(stamp).year
        parsed.append((number, node, rank, text, stamp))
    # A line without a stamp happened after the stamps above it and before the next one: take the next
    # (else the file's last write) so a late traceback is not dated at an early warning.
    times: list[float | None] = []
    upcoming: float | None = None
    for *_rest, stamp in reversed(parsed):
        upcoming = stamp if stamp is not None else upcoming
        times.append(upcoming)
    times.reverse()
    stamped = [t for *_rest, t in parsed if t is not None]
    tail = max(last_write, stamped[-1]) if stamped else None
    return [ReadLine(shown, number, node, rank, text, stamp if stamp is not None else (times[index] or tail), start_order + number)
            for index, (number, node, rank, text, stamp) in enumerate(parsed)]


def read_logs(paths: Iterable[Path]) -> list[ReadLine]:
    """All lines of all files, each file's lines in order (files one after another)."""
    out: list[ReadLine] = []
    for path in paths:
        out.extend(read_log(path, start_order=out[-1].order if out else 0))
    return out


def _split(full: str, default_node: str | None) -> tuple[str | None, int | None, str]:
    node, rank, text = default_node, None, full
    ours = split_node_line(full)
    if ours is not None:
        node, rank, text = ours
    inner, rest = split_rank(text)
    if inner is not None:
        rank, text = inner, rest
    return node, rank, text
