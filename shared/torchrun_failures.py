"""torchrun's words when a worker fails: one parser for the live blame (``tui/launch/failure.py``) and ``--why``
(``tui/doctor/findings.py``, ``tui/doctor/diagnose.py``), so the run and the doctor never read them differently.

What torchrun (``torch.distributed.elastic``) prints on the node whose worker failed:

- at once, from its monitor loop::

      ... api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /usr/bin/python

- after its shutdown, the ``ChildFailedError`` summary, whose first block names the root cause::

      Root Cause (first observed failure):
      [0]:
        time      : 2024-01-01_12:00:00
        host      : node1
        rank      : 3 (local_rank: 1)
        exitcode  : -9 (pid: 2630)
      ...
      Failures:

- and, from a rank asked for its stacks (``faulthandler``), ``Thread 0x7f.. (most recent call first):`` headers.

A negative exit code is the signal that killed the worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["SIGNALS", "SummaryExit", "WorkerFailed", "describe_worker_exit", "is_stack_dump", "root_cause_rank",
           "says_a_worker_failed", "summary_exit", "worker_failed"]

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
"""Signal names for the exit codes torchrun reports (negative) and shells report (128 + N)."""

_WORKER_FAILED = re.compile(r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = re.compile(r"exitcode\s*:\s*(?P<exitcode>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_STACK = re.compile(r"^\s*(Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_ANY_FAILURE = re.compile(r"ChildFailedError|failed \(exitcode: -?\d+\)|^\s*exitcode\s*:\s*-?[1-9]")


@dataclass(frozen=True)
class WorkerFailed:
    """torchrun's ``failed (exitcode: N) local_rank: L (pid: P)`` line: the earliest sign that a rank died."""

    exitcode: int
    local_rank: int
    pid: int


@dataclass(frozen=True)
class SummaryExit:
    """An ``exitcode : N (pid: P)`` line of torchrun's failure summary (``pid`` None when it names none)."""

    exitcode: int
    pid: Optional[int]


def worker_failed(text: str) -> Optional[WorkerFailed]:
    """The worker failure ``text`` reports, or None."""
    match = _WORKER_FAILED.search(text)
    if match is None:
        return None
    return WorkerFailed(int(match.group("exitcode")), int(match.group("local")), int(match.group("pid")))


def root_cause_rank(text: str) -> Optional[tuple[int, int]]:
    """``(rank, local_rank)`` of a summary's ``rank : R (local_rank: L)`` line, or None."""
    match = _ROOT_RANK.match(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def summary_exit(text: str) -> Optional[SummaryExit]:
    """The summary's ``exitcode : N (pid: P)`` in ``text``, or None."""
    match = _SUMMARY_EXIT.search(text)
    if match is None:
        return None
    return SummaryExit(int(match.group("exitcode")), int(match.group("pid")) if match.group("pid") else None)


def is_stack_dump(text: str) -> bool:
    """A faulthandler header line (``Thread 0x... (most recent call first):``)."""
    return bool(_STACK.match(text))


def says_a_worker_failed(text: str) -> bool:
    """torchrun's own words that a worker failed (``ChildFailedError``, a failed exit code), cause unnamed."""
    return bool(_ANY_FAILURE.search(text))


def describe_worker_exit(exitcode: int) -> str:
    """A worker's exit code as torchrun reports it (negative: killed by that signal), in words."""
    if exitcode < 0:
        return f"was killed by {SIGNALS.get(-exitcode, f'signal {-exitcode}')}"
    return f"exited with code {exitcode}"
