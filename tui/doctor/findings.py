"""From lines to findings: the signature table applied to every line, Python tracebacks read whole.

A traceback is one finding at its exception line: when that line matches a signature (a CUDA OOM, a
full disk, a reset connection) the signature speaks; when it was raised inside a function that reads a data
file (``from_jsonl``, ``read_csv``, the datasets builders' ``_generate_tables``) it is ``data.invalid``; otherwise
it is ``code.error`` naming the innermost frame of the user's own code (not site-packages) and the exception. torchrun's
"failed (exitcode: -9) ... (pid: P)" line is a SIGKILL of a worker: ``oom.host`` until the record and
the kernel say more. ftwiz's own node-side error lines (the protocol's ``{"ftwiz": "error", ...}`` and
``ftwiz: error (rank N): ...``, written by the workloads and the user-code runner) are read for what
they say: a signature in the message speaks; a dataset problem is ``data.invalid``, a missing module or
package ``version.skew``, anything else (a script not found, an unreadable code dir) ``code.error``
naming the file, with the message's own fix. An ImportError raised inside an availability probe (``_is_triton_available``)
is no evidence: the probe caught it and the program goes on without the optional module. An exception Python printed and then ignored (``Exception ignored
in: ...`` from a ``__del__`` or an atexit handler at shutdown) is no evidence: the run went on, or had ended. Nor is a
multiprocessing queue feeder thread's broken pipe (its reader had gone; the process goes on).
A signature with ``needs`` (a library that could not be loaded) counts only when the process then died.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from shared.codepaths import code_location, is_library
from shared.doctor_signatures import SIGNATURES, Signature, is_normal, match_line
from shared.protocol import Error, parse_line
from shared.torchrun_failures import summary_exit, worker_failed

from .model import Finding, ReadLine

__all__ = ["find", "ignored_exception_lines", "is_cancellation"]

_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
_EXC_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)|[A-Za-z_][\w.]*Error\b)(?::\s?(?P<msg>.*))?$")
#: Exceptions that are the consequence of another failure or of a stop, never a cause: torchrun's summary of a dead
#: worker, a collective that lost its peer, a signal, Ctrl-C, and a cancellation (asyncio's, concurrent.futures', and
#: TensorFlow's, whose feeder thread raises it when the session closes at the end of a run that worked:
#: DeepLabCut/DeepLabCut#955, #683).
_ECHO_EXCEPTIONS = ("ChildFailedError", "DistBackendError", "DistNetworkError", "SignalException", "KeyboardInterrupt", "CancelledError")
_FTWIZ_ERROR_RE = re.compile(r"ftwiz: error \(rank (?P<rank>\d+)\): (?P<message>.+)$")
_DATA_RE = re.compile(r"^dataset |\.(?:jsonl?|csv|parquet) line \d+|^record at line \d+|not UTF-8 text|expected a JSON object|"
                      r"unknown record shape|\"messages\" must|\"input\" must", re.IGNORECASE)
_PACKAGE_RE = re.compile(r"No module named|ModuleNotFoundError|ImportError|is not installed|missing package|"
                         r"requires? (?:the )?(?:package )?[\w.-]+ ?(?:[<>=]=?|>)\s*\d", re.IGNORECASE)
_FTWIZ_SOURCE = "agent/workloads/errors.py, agent/workloads/usercode.py (ftwiz's node-side error lines)"
_SIGNAL_SOURCE = "https://github.com/pytorch/pytorch/issues/76287 (torchrun: 'failed (exitcode: -9)' for a SIGKILLed worker)"


#: Python's words for an exception it printed and then ignored: raised in a ``__del__``, a weakref callback, a
#: thread's excepthook or an atexit handler (``Error in atexit._run_exitfuncs:`` before Python 3.12).
_IGNORED_RE = re.compile(r"^(?:Exception ignored\b|Error in atexit\._run_exitfuncs:)")

#: IPython/Jupyter's traceback: ``ValueError      Traceback (most recent call last)``, ``Cell In[8], line 1``,
#: ``File ~/x.py:47, in f()``, code lines ``----> 1 f()`` / ``     36 x = 1``.
_IPY_HEAD_RE = re.compile(r"^[A-Za-z_][\w.]*\s{2,}Traceback \(most recent call last\)")
_IPY_FRAME_RE = re.compile(r"^(?:Cell In\[\d+\], line (?P<cell>\d+)|File (?P<file>\S+?):(?P<line>\d+)(?:, in (?P<func>.+))?)$")
_IPY_CODE_RE = re.compile(r"^\s*(?:-+>\s*)?\d+\s|^\s*-+>")

#: An availability probe (xformers' ``_is_triton_available``, ``is_flash_attn_available``): it imports an optional
#: module and catches the ImportError; xformers logs the caught traceback as a WARNING and the program goes on.
_PROBE_RE = re.compile(r"^_?(?:is_\w+_available|check_\w+_available)$")
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")

#: A function that reads records from a data file: ``from_jsonl``, ``read_csv``, ``load_json``, ``parse_tsv`` and the HF
#: datasets json/csv/parquet builders' ``_generate_tables``. An exception raised inside it (a missing key, a value it
#: cannot parse) is the data not being what the loader needs, not a bug of the training code.
_DATA_READER_RE = re.compile(r"^_?(?:(?:from|read|load|parse)_?(?:jsonl?|csv|tsv|parquet)s?(?:_file)?|_generate_tables)$")
_NOT_DATA_ERRORS = ("MemoryError", "KeyboardInterrupt", "SystemExit", "ImportError", "ModuleNotFoundError")

#: A multiprocessing queue's feeder thread (``multiprocessing/queues.py``, ``_feed``): it pickles what was put on the
#: queue and writes it to the pipe. When the reading end has gone (its process exited, or closed the queue) the write
#: fails with a broken or reset connection; the feeder thread prints that traceback and the putting process goes on.
_FEEDER_FRAME_RE = re.compile(r"multiprocessing[/\\]queues\.py$")
_HANGUP_ERRORS = ("BrokenPipeError", "ConnectionResetError", "ConnectionAbortedError")


@dataclass
class _Traceback:
    start: ReadLine
    frames: list[tuple[ReadLine, str, int, str]] = field(default_factory=list)
    ipython: bool = False


def find(lines: Iterable[ReadLine], *, pid_ranks: dict[tuple[str | None, int], int] | None = None) -> list[Finding]:
    """Every finding in ``lines`` (one per matching line; a traceback is one finding)."""
    lines = list(lines)
    ignored = ignored_exception_lines(lines)
    findings: list[Finding] = []
    open_tb: dict[tuple[str, int | None], _Traceback] = {}
    waiting: dict[str, list[tuple[Finding, Signature]]] = {}  # per file: waits and retries not yet seen to succeed
    pending: dict[str, list[tuple[Finding, Signature]]] = {}  # per file: warnings that count once the process dies
    warmup: dict[str, list[tuple[Finding, Signature]]] = {}  # per file: blips before any finite value of their kind
    settled: set[tuple[str, Signature]] = set()  # (file, signature) whose value was seen finite: no warm-up any more
    recovering = [(sig, sig.recovered) for sig in SIGNATURES if sig.recovered is not None]
    repeating: list[tuple[Finding, Signature]] = []  # matches of signatures that count only when they repeat in their log
    for line in lines:
        stream = (line.file, line.rank)
        text = line.text
        for wait, sig in list(waiting.get(line.file, ())):
            if sig.until is not None and sig.until.search(text):  # the wait ended well: that line was no evidence
                findings.remove(wait)
                waiting[line.file].remove((wait, sig))
        for sig, recovered in recovering:
            if recovered.search(text) and not sig.pattern.search(text):  # the value is finite here
                settled.add((line.file, sig))
                for blip, of in list(warmup.get(line.file, ())):
                    if of is sig:  # it blipped in the first steps and recovered: warm-up, no evidence
                        findings.remove(blip)
                        warmup[line.file].remove((blip, of))
        for warned, sig in list(pending.get(line.file, ())):
            if sig.needs is not None and sig.needs.search(text):  # the process died after the warning: now it is evidence
                findings.append(warned)
                pending[line.file].remove((warned, sig))
        if line.order in ignored:
            continue
        notebook = _IPY_HEAD_RE.match(text)
        if notebook or text.startswith("Traceback (most recent call last):"):
            open_tb[stream] = _Traceback(line, ipython=notebook is not None)
            for sig in match_line(text)[:1] if notebook else ():  # a notebook names the exception in its header (the
                # message may lie beyond what was pasted): a signature of that name speaks from there
                findings.append(Finding(sig.cause, sig.weight, sig.echo, line, source=sig.source, fix=sig.fix))
            continue
        tb = open_tb.get(stream)
        if tb is not None:
            frame = _FRAME_RE.match(text)
            if frame:
                tb.frames.append((line, frame.group("file"), int(frame.group("line")), (frame.group("func") or "").strip()))
                continue
            if tb.ipython:
                cell = _IPY_FRAME_RE.match(text.strip())
                if cell:
                    file = cell.group("file") or "<notebook cell>"
                    number = int(cell.group("line") or cell.group("cell"))
                    tb.frames.append((line, file, number, (cell.group("func") or "").strip()))
                    continue
                if _IPY_CODE_RE.match(text):
                    continue
            if text.startswith((" ", "\t")) or not text.strip() or text.lstrip().startswith(("^", "~")):
                continue
            exc = _EXC_RE.match(text.strip())
            del open_tb[stream]
            if exc:
                finding = _from_traceback(tb, line, exc.group("type"), exc.group("msg") or "")
                if finding is not None:
                    findings.append(finding)
                    continue
        said = _ftwiz_error(line)
        if said is not None:
            findings.append(said)
            continue
        killed = worker_failed(text)
        if killed is not None and killed.exitcode == -9:
            pid = killed.pid
            rank = (pid_ranks or {}).get((line.node, pid), (pid_ranks or {}).get((None, pid)))
            where = ReadLine(line.file, line.line, line.node, rank, line.text, line.time, line.order)
            findings.append(Finding("oom.host", 6, False, where, detail=f"pid {pid} was killed by SIGKILL", source=_SIGNAL_SOURCE))
            continue
        for sig in match_line(text)[:1]:
            summary = summary_exit(text) if sig.cause == "oom.host" else None
            killed_pid = summary.pid if summary is not None and summary.exitcode == -9 else None
            detail = f"pid {killed_pid} was killed by SIGKILL" if killed_pid is not None else ""  # torchrun's summary: checked like a kill line
            finding = Finding(sig.cause, sig.weight, sig.echo, line, detail=detail, source=sig.source, fix=sig.fix)
            if sig.needs is not None:
                pending.setdefault(line.file, []).append((finding, sig))
                continue
            findings.append(finding)
            if sig.until is not None:
                waiting.setdefault(line.file, []).append((finding, sig))
            if sig.recovered is not None and (line.file, sig) not in settled:
                warmup.setdefault(line.file, []).append((finding, sig))
            if sig.repeats:
                repeating.append((finding, sig))
    return _without_lone_matches(findings, repeating)


def _without_lone_matches(findings: list[Finding], repeating: list[tuple[Finding, Signature]]) -> list[Finding]:
    """``findings`` less each match of a ``repeats`` signature that is the only one of it left in its log (warm-up
    already set aside)."""
    if not repeating:
        return findings
    kept = {id(finding) for finding in findings}
    left: dict[tuple[str, Signature], list[Finding]] = {}
    for finding, sig in repeating:
        if id(finding) in kept:
            left.setdefault((finding.where.file, sig), []).append(finding)
    lone = {id(alone[0]) for alone in left.values() if len(alone) == 1}
    return [finding for finding in findings if id(finding) not in lone]


def is_cancellation(text: str) -> bool:
    """Whether ``text`` is the exception line of a cancellation (``CancelledError``): a stop something else asked for,
    not even the first error of a log (an echo such as ``DistBackendError`` may still carry the reason in its words)."""
    exc = _EXC_RE.match(text.strip())
    return exc is not None and exc.group("type").rsplit(".", 1)[-1] == "CancelledError"


def ignored_exception_lines(lines: Sequence[ReadLine]) -> set[int]:
    """The ``order`` of every line of an exception report that was printed and then ignored.

    ``Exception ignored in: <function X.__del__ ...>`` (or ``Error in atexit._run_exitfuncs:``), then the traceback
    that follows it on the same stream (frames, indented code lines) and its exception line. The exception did not
    stop the program: a destructor or an exit handler failing at interpreter shutdown, after the work was done.
    So is the traceback of an ImportError raised inside an availability probe (:func:`_probed_imports`), and a queue
    feeder thread's report that the reading end hung up (:func:`_feeder_hangups`).
    """
    out = _probed_imports(lines) | _feeder_hangups(lines)
    state: dict[tuple[str, int | None], str] = {}  # per stream: "header" after the words, "traceback" inside one
    for line in lines:
        stream = (line.file, line.rank)
        text = line.text
        if _IGNORED_RE.match(text.lstrip()):
            state[stream] = "header"
            out.add(line.order)
            continue
        where = state.get(stream)
        if where is None:
            continue
        stripped = text.strip()
        if not stripped:
            continue
        if where == "header" and text.startswith("Traceback (most recent call last):"):
            state[stream] = "traceback"
            out.add(line.order)
        elif where == "traceback" and (text.startswith((" ", "\t")) or stripped.startswith(("^", "~"))):
            out.add(line.order)
        elif _EXC_RE.match(stripped):
            out.add(line.order)
            del state[stream]
        else:
            del state[stream]
    return out


def _probed_imports(lines: Sequence[ReadLine]) -> set[int]:
    """The ``order`` of every line of a traceback whose ImportError an availability probe caught.

    xformers imports triton in ``_is_triton_available`` and logs the caught traceback as a WARNING ("A matching Triton
    is not available, some optimizations will not be enabled"); the program goes on without the optional module.
    """
    return _caught_tracebacks(lines, lambda frame: bool(_PROBE_RE.match((frame.group("func") or "").strip())), _IMPORT_ERRORS)


def _feeder_hangups(lines: Sequence[ReadLine]) -> set[int]:
    """The ``order`` of every line of a traceback a multiprocessing queue's feeder thread printed when the reading end
    of its pipe had hung up (BrokenPipeError, ConnectionResetError).

    The feeder thread (``queues.py``, ``_feed``) catches that error, prints the traceback and the process goes on
    (MLOPTPSU/FedTorch#4: the run still produced its result). Whatever made the reader go is its own evidence. Any
    other error of the feeder thread (a full /dev/shm: 'unable to write to file </torch_...>') still speaks.
    """
    return _caught_tracebacks(lines, lambda frame: (frame.group("func") or "").strip() == "_feed"
                              and bool(_FEEDER_FRAME_RE.search(frame.group("file"))), _HANGUP_ERRORS)


def _caught_tracebacks(lines: Sequence[ReadLine], catcher: Callable[[re.Match[str]], bool], errors: tuple[str, ...]) -> set[int]:
    """The ``order`` of every line of each traceback (per stream) that has a frame ``catcher`` accepts and ends in
    one of ``errors``: code that catches that error there, prints it and goes on."""
    out: set[int] = set()
    open_tb: dict[tuple[str, int | None], tuple[list[int], bool]] = {}  # per stream: its lines so far, a catcher frame seen
    for line in lines:
        stream = (line.file, line.rank)
        text = line.text
        if text.startswith("Traceback (most recent call last):"):
            open_tb[stream] = ([line.order], False)
            continue
        if stream not in open_tb:
            continue
        orders, caught = open_tb[stream]
        frame = _FRAME_RE.match(text)
        if frame or text.startswith((" ", "\t")) or not text.strip() or text.lstrip().startswith(("^", "~")):
            open_tb[stream] = ([*orders, line.order], caught or (frame is not None and catcher(frame)))
            continue
        del open_tb[stream]
        exc = _EXC_RE.match(text.strip())
        if caught and exc and exc.group("type").rsplit(".", 1)[-1] in errors:
            out.update([*orders, line.order])
    return out


def _ftwiz_error(line: ReadLine) -> Finding | None:
    """The finding of one of ftwiz's own error lines, or None (not one, or one an ordinary signature should read)."""
    text = line.text
    rank: int | None = None
    if '"error"' in text:
        record = parse_line(text)
        if not isinstance(record, Error) or record.message is None:
            return None
        message, rank = record.message, record.rank
    else:
        match = _FTWIZ_ERROR_RE.search(text) if "ftwiz: error" in text else None
        if not match:
            return None
        message, rank = match.group("message"), int(match.group("rank"))
    exc_type = message.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    if exc_type in _ECHO_EXCEPTIONS:
        return None
    where = line if line.rank is not None or rank is None else ReadLine(line.file, line.line, line.node, rank, line.text, line.time, line.order)
    sigs = match_line(message)
    if sigs:
        return Finding(sigs[0].cause, sigs[0].weight, sigs[0].echo, where, detail=message[:300], source=sigs[0].source, fix=sigs[0].fix)
    cause = "data.invalid" if _DATA_RE.search(message) else "version.skew" if _PACKAGE_RE.search(message) else "code.error"
    own_fix = message.rsplit("; ", 1)[-1] if "; " in message else ""
    return Finding(cause, 9, False, where, detail=message[:300], source=_FTWIZ_SOURCE, fix=own_fix)


def _from_traceback(tb: _Traceback, exc_line: ReadLine, exc_type: str, message: str) -> Finding | None:
    """The finding of one traceback, or None when its exception line is left to the signatures."""
    if is_normal(exc_line.text) or match_line(exc_line.text) or exc_type.rsplit(".", 1)[-1] in _ECHO_EXCEPTIONS:
        return None
    if not tb.frames:
        return None
    short = exc_type.rsplit(".", 1)[-1]
    reader_line, reader_file, reader_number, reader = tb.frames[-1]
    if _DATA_READER_RE.match(reader) and short not in _NOT_DATA_ERRORS:
        # raised inside the function that reads a data file: the records are not what the loader needs
        detail = f"{short}: {message}".rstrip(": ") + f" while reading data in {reader} ({reader_file}:{reader_number})"
        return Finding("data.invalid", 8, False, exc_line, extra=[reader_line], detail=detail,
                       source="Python traceback raised in a data-file reader (stochasticai/xTuring#261)")
    own = [f for f in tb.frames if not is_library(f[1])]
    frame_line, file, number, func = (own or tb.frames)[-1]
    detail = f"{short}: {message}".rstrip(": ") + f" at {code_location(file, number, func)}"
    return Finding("code.error", 7, False, exc_line, extra=[frame_line], detail=detail,
                   source="Python traceback (docs.python.org/3/library/traceback.html)")
