"""``GET /v1/kernel/oom/{pid}``: the kernel's OOM-killer record of a pid on this node (the failure doctor).

A rank that died of SIGKILL is ``oom.host`` only in name until the kernel says it killed that pid; the
record is read from ``/dev/kmsg`` (every record since boot still in the ring buffer), else from
``journalctl -k``. Reading needs root or CAP_SYSLOG, as the agent service has.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import subprocess
from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Path

from shared.models import KernelOomRecord

__all__ = ["find_oom_kill", "read_kmsg", "router"]

router = APIRouter(prefix="/v1/kernel", tags=["kernel"])

_MAX_RECORDS = 200_000


@router.get("/oom/{pid}", response_model=KernelOomRecord, summary="The kernel's OOM-kill record of a pid, if any")
async def oom(pid: Annotated[int, Path(ge=1, le=2**22, description="The process id torchrun reported as killed.")]) -> KernelOomRecord:
    """Search the kernel log for the OOM killer's line about ``pid``."""
    return await asyncio.to_thread(lookup, pid)


def lookup(pid: int, *, kmsg_path: str = "/dev/kmsg") -> KernelOomRecord:
    """The record for ``pid`` from ``kmsg_path``, else from ``journalctl -k``."""
    problems = []
    for source, reader in ((kmsg_path, lambda: read_kmsg(kmsg_path)), ("journalctl -k", _journal)):
        try:
            lines = reader()
        except OSError as exc:
            problems.append(f"{source}: {exc.strerror or exc}")
            continue
        line = find_oom_kill(lines, pid)
        return KernelOomRecord(pid=pid, found=line is not None, line=line, source=source, error=None)
    return KernelOomRecord(pid=pid, found=False, line=None, source="", error="; ".join(problems) + " (the agent needs root or CAP_SYSLOG)")


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
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    out: list[str] = []
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
            out.append(text.split(";", 1)[1] if ";" in text else text)
    finally:
        os.close(fd)
    return out


def _journal() -> list[str]:
    try:
        done = subprocess.run(["journalctl", "-k", "-o", "cat", "--no-pager", "-q"], check=False, capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise OSError(str(exc)) from None
    if done.returncode != 0:
        raise OSError(done.stderr.strip()[:200] or f"journalctl exited {done.returncode}")
    return done.stdout.splitlines()
