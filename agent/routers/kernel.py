"""``GET /v1/kernel/oom/{pid}``: the kernel's OOM-killer record of a pid on this node (the failure doctor).

A rank that died of SIGKILL is ``oom.host`` only in name until the kernel says it killed that pid; the
record is read from ``/dev/kmsg`` (every record since boot still in the ring buffer), else from
``journalctl -k``. Reading needs root or CAP_SYSLOG, as the agent service has.

Honest answers only: a record counts only when it names the pid and, when the caller gives the kill's time
(``at``), was written within ``window_s`` of it (pids are reused). ``found: false`` with no ``error`` means
the kernel log was read, reaches back to the kill, and has no OOM kill of the pid; when the log cannot be
read, is empty, or begins after the kill, ``error`` says so and nothing is concluded.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import subprocess
import time
from collections.abc import Iterable
from typing import Annotated, Optional

from fastapi import APIRouter, Path, Query

from shared.models import KernelOomRecord

__all__ = ["WINDOW_S", "find_oom_kill", "lookup", "read_kmsg", "read_kmsg_records", "router"]

router = APIRouter(prefix="/v1/kernel", tags=["kernel"])

_MAX_RECORDS = 200_000
#: A kernel record counts for a kill only this near it (the kernel kills first; torchrun notices seconds later).
WINDOW_S = 300.0

#: ``(unix time or None, message)`` per kernel record.
Records = list[tuple[Optional[float], str]]


@router.get("/oom/{pid}", response_model=KernelOomRecord, summary="The kernel's OOM-kill record of a pid, if any")
async def oom(pid: Annotated[int, Path(ge=1, le=2**22, description="The process id torchrun reported as killed.")],
              at: Annotated[Optional[float], Query(ge=0, description="Unix time the kill was seen; only kernel records within "
                                                   f"{WINDOW_S:.0f} s of it count (pids are reused).")] = None) -> KernelOomRecord:
    """Search the kernel log for the OOM killer's line about ``pid`` (near ``at`` when given)."""
    return await asyncio.to_thread(lookup, pid, at=at)


def lookup(pid: int, *, at: Optional[float] = None, window_s: float = WINDOW_S, kmsg_path: str = "/dev/kmsg",
           journal: Optional[Records] = None) -> KernelOomRecord:
    """The record for ``pid`` from ``kmsg_path``, else from ``journalctl -k`` (``journal``: its records, for tests)."""
    problems = []
    sources = ((kmsg_path, lambda: read_kmsg_records(kmsg_path)),
               ("journalctl -k", (lambda: journal) if journal is not None else _journal))
    for source, reader in sources:
        try:
            records = reader()
        except OSError as exc:
            problems.append(f"{source}: {exc.strerror or exc}")
            continue
        if not records:
            problems.append(f"{source}: no kernel records could be read")
            continue
        if at is not None:
            stamped = [t for t, _ in records if t is not None]
            if not stamped or min(stamped) > at - window_s:
                problems.append(f"{source}: its records begin after the kill (the ring buffer no longer reaches back to it)")
                continue
            records = [(t, text) for t, text in records if t is not None and abs(t - at) <= window_s]
        line = find_oom_kill((text for _, text in records), pid)
        return KernelOomRecord(pid=pid, found=line is not None, line=line, source=source, error=None)
    return KernelOomRecord(pid=pid, found=False, line=None, source="",
                           error="cannot confirm: " + "; ".join(problems) + " (the agent needs root or CAP_SYSLOG)")


def find_oom_kill(lines: Iterable[str], pid: int) -> str | None:
    """The kernel line that says the OOM killer killed ``pid`` (``Killed process PID`` or ``oom-kill:...pid=PID,``)."""
    killed = re.compile(rf"Killed process {pid}\b")
    summary = re.compile(rf"oom-kill:.*\bpid={pid},")
    fallback = None
    for line in lines:
        if killed.search(line):
            return line.strip()
        if fallback is None and summary.search(line):
            fallback = line.strip()
    return fallback


def read_kmsg(path: str = "/dev/kmsg") -> list[str]:
    """Every message still in the kernel's ring buffer (non-blocking: stops at the newest)."""
    return [text for _, text in read_kmsg_records(path)]


def read_kmsg_records(path: str = "/dev/kmsg") -> Records:
    """``(unix time, message)`` of every record still in the ring buffer (the time from the record's
    microseconds since boot)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    booted = time.time() - time.monotonic()
    out: Records = []
    try:
        while len(out) < _MAX_RECORDS:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote the record we were at: go on
                    continue
                raise
            if not record:
                break
            text = record.decode("utf-8", errors="replace")
            prefix, _, message = text.partition(";")
            fields = prefix.split(",")
            stamp = booted + int(fields[2]) / 1e6 if len(fields) > 2 and fields[2].isdigit() else None
            out.append((stamp, message if message else text))
    finally:
        os.close(fd)
    return out


def _journal() -> Records:
    try:
        done = subprocess.run(["journalctl", "-k", "-o", "short-unix", "--no-pager", "-q"], check=False, capture_output=True,
                              text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise OSError(str(exc)) from None
    if done.returncode != 0:
        raise OSError(done.stderr.strip()[:200] or f"journalctl exited {done.returncode}")
    out: Records = []
    for line in done.stdout.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            when: Optional[float] = float(stamp)
        except ValueError:
            when, rest = None, line
        out.append((when, rest.split(" kernel: ", 1)[-1]))
    return out
