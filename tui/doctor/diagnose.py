"""Findings to diagnoses: group by cause, node and rank; root causes first in time; echoes demoted.

One failure makes every other rank print something (a reset connection, a watchdog timeout, a closed
rendezvous, torchrun's ChildFailedError summary). Those are *echoes*: they go below every root cause,
however early they are. Among root causes the earliest (across nodes, by the lines' times) comes first,
then the more telling signature. What the cluster knows overrides the log: a worker SIGKILL that ftwiz
did not send is ``oom.host``, *confirmed* when the node's kernel recorded an OOM kill of that pid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shared.doctor_signatures import CAUSES, FIXES, is_normal
from shared.torchrun_failures import says_a_worker_failed

from .findings import ignored_exception_lines, is_cancellation
from .fixes import computed_fix
from .model import Diagnosis, Evidence, Finding, ReadLine

__all__ = ["KernelLookup", "rank_findings"]

#: ``(node, pid, unix time of the kill or None) -> the kernel's OOM-kill line for that pid near that time, or None``;
#: raises OSError when it cannot ask or the node cannot read its kernel log (then nothing is concluded).
KernelLookup = Callable[[str | None, int, float | None], str | None]

_MAX_EVIDENCE = 4
#: An exception line (``ValueError: ...``, ``torch.AcceleratorError``) or an ``error:`` line.
_ERROR_LOOKING = re.compile(r"(?:^\s*|[\s\]>|]|^\W*)(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure)\b(?::|\s*$)|"
                            r"\berror\b:|^\s*(?:fatal|FATAL)\b")
#: A programming error's exception line, printed without its traceback (an excerpt, a launcher that kept only the last
#: line): the exception is in the running code, ``code.error``, though no frame names the file. Not a ``TypeError`` that
#: a call's arguments raise (``unexpected keyword argument``, ``takes 3 positional arguments but 4 were given``): that is a
#: caller written for another version of the callee as often as a bug. (A matrix-shape mismatch has a signature of its own.)
_PROGRAMMING_ERROR = re.compile(r"(?:^|[\s\]>:])(?:NameError|UnboundLocalError|AttributeError|IndexError|KeyError|AssertionError|"
                                r"ZeroDivisionError|RecursionError|TypeError(?!.*(?:unexpected keyword argument|positional arguments? but))|"
                                r"RuntimeError: (?:The size of tensor a \(\d+\) must match|"
                                r"shape '\[[^\]]*\]' is invalid for input of size))\b")
#: The launcher's own summary of a worker's failure (torchrun, the elastic agent): never "the first error".
_LAUNCHER = re.compile(r"ChildFailedError|torch/distributed/elastic|failed \(exitcode|^\s*(?:exitcode|error_file|traceback)\s*:|"
                       r"Root Cause|^Failures:|SignalException|Sending process \d+ closing signal|KeyboardInterrupt")


def rank_findings(
    findings: Sequence[Finding],
    lines: Sequence[ReadLine],
    *,
    record: Mapping[str, Any] | None = None,
    kernel: KernelLookup | None = None,
) -> list[Diagnosis]:
    """The diagnoses, most likely root cause first (empty when nothing points to a failure)."""
    findings = [f for f in findings if not _sent_by_ftwiz(f, record)]
    _demote_late_rendezvous(findings, lines)
    groups: dict[tuple[str, str | None, int | None], list[Finding]] = {}
    for finding in findings:
        groups.setdefault((finding.cause, finding.where.node, finding.where.rank), []).append(finding)
    diagnoses = [_diagnosis(key, group, record, kernel) for key, group in groups.items()]
    diagnoses.sort(key=lambda d: (d.echo, _time_key(d.time), -_weight(groups, d), d.node or "", -1 if d.rank is None else d.rank))
    first_root = next((d for d in diagnoses if not d.echo), None)
    for diag in diagnoses:
        if diag.own_fix and not diag.echo:
            continue
        try:
            fix = computed_fix(diag, record=record, lines=lines, first_root=first_root if diag.echo else None)
        except (TypeError, ValueError, AttributeError):  # a record whose numbers are not numbers: the generic fix
            fix = None
        diag.fix = fix or diag.fix
    if not diagnoses and (_failed(record) or _failure_lines(lines) or _error_lines(lines)):
        diagnoses.append(_without_signature(lines, record))
    return diagnoses


def _time_key(value: float | None) -> float:
    return value if value is not None else math.inf


def _weight(groups: Mapping[tuple[str, str | None, int | None], list[Finding]], diag: Diagnosis) -> int:
    return max(f.weight for f in groups[(diag.cause, diag.node, diag.rank)])


def _diagnosis(key: tuple[str, str | None, int | None], group: list[Finding], record: Mapping[str, Any] | None,
               kernel: KernelLookup | None) -> Diagnosis:
    cause, node, rank = key
    group = sorted(group, key=lambda f: (_time_key(f.where.time), f.where.order))
    evidence: list[Evidence] = []
    for finding in group:
        for line in [finding.where, *finding.extra]:
            item = Evidence(line.file, line.line, line.text.strip()[:400])
            if item not in evidence and len(evidence) < _MAX_EVIDENCE:
                evidence.append(item)
    first = group[0]
    # A traceback read whole says more (file:line in your code) than the one-line report of the same exception.
    detail = next((f.detail for f in group if f.extra and f.detail), first.detail)
    where = f"{node or '?'}/rank {rank}" if rank is not None else node
    explanation = f"{CAUSES[cause]} on {where}" if where else CAUSES[cause]
    if detail:
        explanation += f": {detail}"
    if len(group) > 1:
        explanation += f" ({len(group)} lines)"
    own = next((f.fix for f in group if f.fix), "")
    diag = Diagnosis(cause, node, rank, evidence, explanation, own or FIXES[cause], echo=all(f.echo for f in group),
                     time=min((f.where.time for f in group if f.where.time is not None), default=None), detail=detail,
                     own_fix=bool(own))
    if cause == "oom.host":
        _confirm_oom(diag, group, record, kernel)
    return diag


def _confirm_oom(diag: Diagnosis, group: list[Finding], record: Mapping[str, Any] | None, kernel: KernelLookup | None) -> None:
    """Ask the node's kernel whether it OOM-killed the pid; say plainly when nobody could ask."""
    kills = [(int(f.detail.split()[1]), f.where.time) for f in group if f.detail.startswith("pid ")]
    if not kills:
        return
    if kernel is None:
        diag.explanation += "; cannot confirm it was the OOM killer: the node's kernel log was not consulted (no agent for this log)"
        return
    for pid, when in kills:
        try:
            found = kernel(diag.node, pid, when)
        except OSError as exc:
            diag.explanation += f"; cannot confirm it was the OOM killer: {diag.node}'s kernel log could not be read ({exc})"
            return
        if found:
            diag.confirmed = True
            diag.evidence.insert(0, Evidence(f"{diag.node or 'node'}:kernel", 0, found.strip()[:400]))
            diag.explanation = f"the kernel's OOM killer killed pid {pid} on {diag.node} (rank {diag.rank}): host memory ran out"
            return
    diag.confirmed = False
    diag.explanation = (f"pid {kills[0][0]} on {diag.node} (rank {diag.rank}) was killed by SIGKILL that ftwiz did not send; "
                        "the node's kernel log, read around the kill, has no OOM-kill record for it: something outside killed "
                        "it (a user, a job scheduler, a watchdog), not the OOM killer")
    diag.fix = "find who sent SIGKILL on that node (`journalctl --since`, the scheduler's log); the kernel did not OOM-kill it"


def _demote_late_rendezvous(findings: Sequence[Finding], lines: Sequence[ReadLine]) -> None:
    """A rendezvous error after workers ran is the store going away in the teardown: an echo.

    The rendezvous had worked once workers print (a ``[rankN]:`` or ``node/N |`` line); a torchrun that
    then cannot reach the store is seeing the master's torchrun exit after some rank's failure.
    """
    started = [line.time if line.time is not None else -math.inf for line in lines if line.rank is not None]
    if not started:
        return
    first_worker = min(started)
    for finding in findings:
        when = finding.where.time
        if finding.cause == "rendezvous" and (when is None or when > first_worker):
            finding.echo = True


def _sent_by_ftwiz(finding: Finding, record: Mapping[str, Any] | None) -> bool:
    """A SIGKILL after ftwiz began stopping the run is ftwiz's own (its grace period ran out)."""
    if finding.cause != "oom.host" or not record or not finding.detail.startswith("pid "):
        return False
    stop_at = record.get("stop_requested_at")
    when = finding.where.time
    if stop_at is None or when is None:
        return False
    # ftwiz stops with SIGTERM and sends SIGKILL only after its grace period: a kill seen later is ours.
    return when > float(stop_at) + 0.5


def _failed(record: Mapping[str, Any] | None) -> bool:
    return bool(record) and str(record.get("status")) in ("failed", "launch_failed")  # type: ignore[union-attr]


def _failure_lines(lines: Sequence[ReadLine]) -> list[ReadLine]:
    """torchrun's own words that a worker failed (exit code, ChildFailedError) with no cause named."""
    return [line for line in lines if says_a_worker_failed(line.text)]


def _error_lines(lines: Sequence[ReadLine]) -> list[ReadLine]:
    """Lines that look like an error (an exception line, an ``error:`` line), not the launcher's summary of one, nor
    an exception Python printed and ignored (a ``__del__`` at shutdown), nor a cancellation."""
    ignored = ignored_exception_lines(lines)
    return [line for line in lines if _ERROR_LOOKING.search(line.text) and not _LAUNCHER.search(line.text)
            and not is_normal(line.text) and line.order not in ignored and not is_cancellation(line.text)]


def _without_signature(lines: Sequence[ReadLine], record: Mapping[str, Any] | None) -> Diagnosis:
    """The diagnosis of a failure no signature named: ``unknown``, with the earliest error-looking line of the first
    failing rank as its evidence and explanation, or ``code.error`` when that line is a programming error's exception
    printed without its traceback."""
    failed = (record or {}).get("failed") or {}
    node, rank = failed.get("node"), failed.get("rank")
    errors = sorted(_error_lines(lines), key=lambda line: (_time_key(line.time), line.order))
    mine = [line for line in errors if (node is None or line.node == node) and (rank is None or line.rank in (rank, None))]
    if errors and not mine and node is None and rank is None:
        mine = errors
    if mine:
        first = mine[0]
        if node is None and rank is None:
            node, rank = first.node, first.rank
            first = next(line for line in mine if line.node == node and line.rank == rank)
        where = f" on {node or '?'}/rank {rank}" if rank is not None else f" on {node}" if node else ""
        text = first.text.strip()[:400]
        if _PROGRAMMING_ERROR.search(first.text):
            return Diagnosis("code.error", node, rank, [Evidence(first.file, first.line, text)],
                             f"{CAUSES['code.error']}{where}: {text} (no traceback in the log: the rank's full output names "
                             "the file and line)", FIXES["code.error"], time=first.time, detail=text)
        return Diagnosis("unknown", node, rank, [Evidence(first.file, first.line, text)],
                         f"no known signature; the first error{where}: {text}", FIXES["unknown"], time=first.time)
    said = [line for line in lines if line.node == node and (rank is None or line.rank in (rank, None)) and line.text.strip()]
    if not record:
        said = _failure_lines(lines) or said
    evidence = [Evidence(line.file, line.line, line.text.strip()[:400]) for line in said[-_MAX_EVIDENCE:]]
    reason = (record or {}).get("reason") or "the run failed"
    return Diagnosis("unknown", node, rank, evidence, f"no known signature in the logs; {reason}", FIXES["unknown"])
