"""Stop every process of a run on this node: the ones whose environment holds ``FTWIZ_RUN_ID`` (and
``FTWIZ_NODE`` naming this node: the same rule and the same /proc reader as the node helper's, :mod:`nodeside.procmatch`).

The launcher starts each node's torchrun in its own session, so a matching process normally
leads a process group made only of the run's processes; the whole group gets the signal. A
group that also holds unrelated processes (a shell, the agent itself) is never signalled as a
group: only its matching members are. The SIGKILL pass recomputes the groups from the processes
still there (same pid, same start time): a group whose members all left may be another's by then. Reading another process's environment needs the same
uid or CAP_SYS_PTRACE, which is why the agent runs as the user who runs training.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from nodeside.procmatch import alive, run_processes, stat_fields
from shared.models import KilledProcess, RunStopResult

__all__ = ["find_run_processes", "stop_run"]

_POLL_S = 0.05


@dataclass(frozen=True)
class _Proc:
    pid: int
    pgid: int
    started: Optional[int]
    name: Optional[str]
    cmdline: Optional[str]


def find_run_processes(run_id: str, *, node: Optional[str] = None, proc_root: str = "/proc") -> list[int]:
    """Pids (other than this agent) of run ``run_id`` (on ``node`` when given: ``FTWIZ_NODE`` must match too)."""
    return [pid for pid, _env in run_processes(run_id, node, proc_root)]


def stop_run(run_id: str, *, node: Optional[str] = None, grace_s: float = 5.0, kill_wait_s: float = 2.0) -> RunStopResult:
    """SIGTERM the run's processes on ``node`` (by group where safe), wait ``grace_s``, SIGKILL the rest."""
    matching = _scan(run_id, node)
    if not matching:
        return RunStopResult(run_id=run_id)
    last_signal: dict[int, str] = {}
    _send(_targets(matching), signal.SIGTERM, last_signal)
    # A process between fork and exec when the scan read it showed no environment yet (a launcher starting a
    # worker), and one forked since was not there: scan again now that the signal is out, and signal those too.
    known = {proc.pid for proc in matching}
    late = [proc for proc in _scan(run_id, node) if proc.pid not in known]
    if late:
        _send(_targets(late), signal.SIGTERM, last_signal)
        matching += late
    alive = _wait_gone([proc.pid for proc in matching], grace_s)
    if alive:
        # Groups again, from the survivors only: a group whose members all left may be another's id by now.
        survivors = [proc for proc in matching if proc.pid in alive and _still(proc)]
        _send(_targets(survivors), signal.SIGKILL, last_signal)
        alive = _wait_gone(alive, kill_wait_s)
    killed = [
        KilledProcess(
            pid=proc.pid,
            name=proc.name,
            cmdline=proc.cmdline,
            signal=last_signal.get(proc.pid, "SIGTERM"),
            gone=proc.pid not in alive,
        )
        for proc in matching
    ]
    return RunStopResult(run_id=run_id, killed=killed, remaining=sorted(alive))


def _scan(run_id: str, node: Optional[str]) -> list[_Proc]:
    return [proc for pid in find_run_processes(run_id, node=node) if (proc := _describe(pid)) is not None]


@dataclass(frozen=True)
class _Targets:
    groups: dict[int, list[int]]
    """Process groups signalled whole, with the matching pids they hold."""
    singles: list[int]
    """Matching pids signalled one by one."""


def _targets(matching: list[_Proc]) -> _Targets:
    own_group = os.getpgrp()
    matching_pids = {proc.pid for proc in matching}
    by_group: dict[int, list[int]] = {}
    for proc in matching:
        by_group.setdefault(proc.pgid, []).append(proc.pid)
    groups, singles = {}, []
    for pgid, pids in by_group.items():
        members = _group_members(pgid)
        if pgid > 1 and pgid != own_group and members and members <= matching_pids | _zombies(members):
            groups[pgid] = pids
        else:
            singles.extend(pids)
    return _Targets(groups=groups, singles=singles)


def _send(targets: _Targets, sig: signal.Signals, last_signal: dict[int, str]) -> None:
    for pgid, pids in targets.groups.items():
        try:
            os.killpg(pgid, sig)
        except OSError:
            continue
        for pid in pids:
            last_signal[pid] = sig.name
    for pid in targets.singles:
        try:
            os.kill(pid, sig)
        except OSError:
            continue
        last_signal[pid] = sig.name


def _wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = [pid for pid in pids if _alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [pid for pid in alive if _alive(pid)]
    return alive


def _alive(pid: int) -> bool:
    return alive(pid)


def _describe(pid: int) -> Optional[_Proc]:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", errors="replace").strip()[:300] or None
    except OSError:
        cmdline = None
    started = int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None
    return _Proc(pid=pid, pgid=int(fields[2]), started=started, name=_comm(pid), cmdline=cmdline)


def _still(proc: _Proc) -> bool:
    """``proc`` is still that process: same start time, same group (a pid reused meanwhile is not)."""
    fields = _stat_fields(proc.pid)
    return fields is not None and len(fields) > 19 and fields[2] == str(proc.pgid) and fields[19] == str(proc.started)


def _stat_fields(pid: int) -> Optional[list[str]]:
    return stat_fields(pid)


def _comm(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _group_members(pgid: int) -> set[int]:
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and len(fields) > 2 and fields[2] == str(pgid):
                members.add(int(entry))
    return members


def _zombies(pids: Iterable[int]) -> set[int]:
    return {pid for pid in pids if not _alive(pid)}
