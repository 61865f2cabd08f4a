"""Run the user's own training code on one rank: ``python -m ftwiz_workloads.usercode --spec job.json``.

torchrun starts this on every rank for ``workload = "command"``. It runs ``[job].command`` in this
same process (``runpy``: a script as ``__main__`` with its own ``sys.argv``, or ``-m module``), so the
rank keeps torchrun's environment and pid, and first:

- registers the SIGUSR1 stack dump (the launcher's dump before a stall stop) and dies with torchrun;
- prints the ``started`` line (rank, local rank, world size, pid) so the run record knows who ran where;
- sets this rank's own batch numbers (``FTWIZ_BALANCE``, ``FTWIZ_GLOBAL_BATCH``, ``FTWIZ_SAMPLES_PER_STEP``,
  ``FTWIZ_MICRO_BATCH``, ``FTWIZ_GRAD_ACCUM``) from the launch plan's table in ``job.json`` (its node, its local
  rank): torchrun gives every rank of a node the same environment, so the per-rank values are resolved here;
- with ``[job].progress_regex``, copies each matching stdout line as a ``progress`` line;
- on global rank 0, tails LLaMA-Factory's ``<output_dir>/trainer_log.jsonl`` (``output_dir`` from the
  YAML in the command, else ``[job].output_dir``) and prints its records as ``progress`` lines.

The code runs from the shipped dir (``<rundir>/code``), or from the workdir when ``code_dir = ""``.
Standard library only: the user's code imports torch itself. Exit code: the code's own (an uncaught
exception prints its traceback and exits 1, as with a plain ``python train.py``).
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import re
import runpy
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional, TextIO

from shared.codepaths import code_location, is_library
from shared.nodewire import NODE_ENV
from shared.protocol import Progress, format_line

from .dist import die_with_parent, exit_without_teardown, register_stack_dump
from .protocol import emit

CODE_SUBDIR = "code"
_TAIL_EVERY_S = 1.0


def main(argv: Optional[list[str]] = None) -> int:
    """Parse ``--spec``, prepare this rank, run the user's command."""
    parser = argparse.ArgumentParser(prog="python -m ftwiz_workloads.usercode", description="Run [job].command on this rank.")
    parser.add_argument("--spec", required=True, metavar="PATH", help="the job spec JSON written by the launcher")
    args = parser.parse_args(argv)
    register_stack_dump()
    die_with_parent()
    with open(args.spec) as fh:
        spec: dict[str, Any] = json.load(fh)
    command = list(spec.get("command") or [])
    if not command:
        emit("error", rank=_env_int("RANK"), message='[job].command is empty: set command = ["train.py", ...] in ftwiz.toml')
        return 2
    root = code_root(spec, os.path.dirname(os.path.abspath(args.spec)))
    os.chdir(root)
    rank = _env_int("RANK")
    balance = set_balance_env(spec, os.environ.get(NODE_ENV, ""), _env_int("LOCAL_RANK"), os.environ)
    started: dict[str, Any] = {"balance": balance} if balance is not None else {}
    emit("started", rank=rank, local_rank=_env_int("LOCAL_RANK"), world_size=_env_int("WORLD_SIZE", 1),
         local_world_size=_env_int("LOCAL_WORLD_SIZE", 1), hostname=socket.gethostname(), backend=None, pid=os.getpid(),
         workload="command", **started)
    pattern = spec.get("progress_regex")
    tee = RegexTee(sys.stdout, re.compile(pattern), rank) if pattern else None
    if tee is not None:
        sys.stdout = tee
    if rank == 0:
        log = trainer_log_path(command, spec.get("output_dir") or "")
        start = os.path.getsize(log) if os.path.exists(log) else 0  # records of an earlier run are not news
        threading.Thread(target=tail_trainer_log, args=(log, sys.stdout), kwargs={"offset": start}, name="ftwiz-trainer-log",
                         daemon=True).start()
    try:
        return run_command(command, root)
    finally:
        if tee is not None:
            tee.finish()


def set_balance_env(spec: dict[str, Any], node: str, local_rank: int, environ: Any) -> Optional[dict[str, str]]:
    """Put this rank's ``FTWIZ_*`` batch numbers (``job.json`` → ``balance_env[node][local_rank]``) into ``environ``;
    returns them (None when the plan sets none: ``balance = "off"`` with no batch declared)."""
    table = spec.get("balance_env")
    if not isinstance(table, dict):
        return None
    ranks = table.get(node) or []
    if not 0 <= local_rank < len(ranks) or not isinstance(ranks[local_rank], dict):  # never silently different: say it
        emit("note", rank=_env_int("RANK"), message=f"balance: the launch planned {len(ranks)} rank(s) on node {node or '?'}, "
             f"none for local rank {local_rank}: FTWIZ_* batch variables not set on this rank")
        return None
    mine = {str(k): str(v) for k, v in ranks[local_rank].items()}
    environ.update(mine)
    return mine


def _forget_shared() -> None:
    """Forget ftwiz's ``shared`` modules (shipped beside the workloads, loaded by now and still referenced by them)
    before the user's code runs: a ``shared`` package of the user's own, in its script's folder or the ``-m`` root,
    then imports as theirs instead of failing inside ours."""
    for name in [name for name in sys.modules if name == "shared" or name.startswith("shared.")]:
        del sys.modules[name]


def code_root(spec: dict[str, Any], rundir: str) -> str:
    """Where the code is: the shipped copy in the run dir, or the workdir when ``code_dir`` is ``""``."""
    if spec.get("code_dir", ".") == "":
        return os.path.expanduser(spec.get("workdir") or os.getcwd())
    return os.path.join(rundir, CODE_SUBDIR)


def run_command(command: list[str], root: str) -> int:
    """Run a script or ``-m module`` as ``__main__`` here; a ``SystemExit`` gives the code's exit code."""
    _forget_shared()
    try:
        if command[0] == "-m":
            sys.argv = [command[1], *command[2:]]
            sys.path.insert(0, root)
            runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(command[0])
            if not os.path.isfile(script):
                near = difflib.get_close_matches(command[0], _scripts(root), n=1)
                guess = f"did you mean {near[0]}? " if near else ""
                emit("error", rank=_env_int("RANK"), message=f"{command[0]} not found in {root}: {guess}[job].command resolves inside the "
                     "shipped code_dir (or the node's workdir when code_dir = \"\"); fix the path or code_dir")
                return 2
            sys.argv = [script, *command[1:]]
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except Exception as error:
        report_exception(error)
        return 1
    return 0


def _scripts(root: str) -> list[str]:
    """The Python files under ``root`` (relative), for a "did you mean" on a mistyped script."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames if f.endswith(".py")]
        if len(found) > 2000:
            break
    return found


def report_exception(error: BaseException) -> None:
    """The traceback on stderr (as python prints it), an ``error`` line naming the exception and where it
    was raised, and torchrun's error file (its failure summary then quotes the traceback, as ``@record`` does)."""
    stack = traceback.format_exc()
    sys.stderr.write(stack)
    sys.stderr.flush()
    where = ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]  # not this runner's
    if isinstance(error, SyntaxError) and error.filename:  # the script never ran: its file and line are the place
        where = f" at {code_location(os.path.basename(error.filename), error.lineno or 0)}"
    elif frames:  # the innermost frame of the user's own code, named as the doctor names it
        own = [f for f in frames if not is_library(f.filename)] or frames
        where = f" at {code_location(os.path.basename(own[-1].filename), own[-1].lineno or 0, own[-1].name)}"
    emit("error", rank=_env_int("RANK"), message=f"{type(error).__name__}: {error}{where}")
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        data = {"message": {"message": f"{type(error).__name__}: {error}",
                            "extraInfo": {"py_callstack": stack, "timestamp": str(int(time.time()))}}}
        try:
            with open(path, "w") as fh:
                json.dump(data, fh)
        except OSError:
            pass


#: The most of an unfinished line a :class:`RegexTee` keeps (a progress line is short; the tail of a longer one is kept).
PARTIAL_CAP = 8192
#: ``\r``-ended updates (a redrawn bar) are looked at once per this many seconds at most; the latest one wins.
REDRAW_EVERY_S = 0.5
_LINE_END = re.compile(r"([\r\n])")


class RegexTee(io.TextIOBase):
    """stdout that also prints a ``progress`` line after each line ``[job].progress_regex`` matches.

    ``\r`` ends a line as ``\n`` does (tqdm redraws its bar with ``\r`` alone when not on a terminal). A
    ``\n``-ended line is matched at once; of the ``\r``-ended ones (thousands a second from a fast bar) only the
    latest is kept and matched at most every :data:`REDRAW_EVERY_S` (and by :meth:`finish`). At most
    :data:`PARTIAL_CAP` characters of an unfinished line are kept: each write costs its own length.
    """

    def __init__(self, inner: TextIO, pattern: "re.Pattern[str]", rank: int, *,
                 clock: Callable[[], float] = time.monotonic, redraw_every_s: float = REDRAW_EVERY_S) -> None:
        self.inner, self.pattern, self.rank = inner, pattern, rank
        self._clock, self._redraw_every_s = clock, redraw_every_s
        self._partial = ""
        self._redrawn: Optional[str] = None
        self._redrawn_seen = float("-inf")

    def write(self, text: str) -> int:
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut < 0:
            self._partial = (self._partial + text)[-PARTIAL_CAP:]
            return self.inner.write(text)
        written = self.inner.write(text[:cut + 1])
        pieces = _LINE_END.split(self._partial + text[:cut + 1])  # line, end, line, end, ..., ""
        self._partial = text[cut + 1:][-PARTIAL_CAP:]
        for at in range(1, len(pieces), 2):
            line, end = pieces[at - 1], pieces[at]
            if end == "\r":
                self._redrawn = line
            else:
                self._match_redrawn()
                self._match(line)
        if self._redrawn is not None and self._clock() - self._redrawn_seen >= self._redraw_every_s:
            self._match_redrawn()
        return written + self.inner.write(text[cut + 1:])

    def finish(self) -> None:
        """Match the last ``\r``-ended update still held (the command ended)."""
        self._match_redrawn()
        self.inner.flush()

    def _match_redrawn(self) -> None:
        if self._redrawn is not None:
            line, self._redrawn = self._redrawn, None
            self._redrawn_seen = self._clock()
            self._match(line)

    def _match(self, line: str) -> None:
        record = regex_record(self.pattern, line[-PARTIAL_CAP:])
        if record is not None:
            self.inner.write(format_line(Progress(rank=self.rank, **record)) + "\n")
            self.inner.flush()

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")


def regex_record(pattern: "re.Pattern[str]", line: str) -> Optional[dict[str, Any]]:
    """Fields of a progress line from the named groups step, total, loss, lr, epoch (None: no match)."""
    if line.lstrip().startswith('{"ftwiz"'):
        return None
    match = pattern.search(line)
    if match is None:
        return None
    groups = match.groupdict()
    out: dict[str, Any] = {}
    for group, key, kind in (("step", "step", int), ("total", "total_steps", int), ("loss", "loss", float),
                             ("lr", "learning_rate", float), ("epoch", "epoch", float)):
        value = groups.get(group)
        if value is None:
            continue
        try:
            out[key] = kind(float(value)) if kind is int else float(value)
        except ValueError:
            continue
    return out or None


def trainer_log_path(command: list[str], fallback_output_dir: str) -> str:
    """LLaMA-Factory's ``trainer_log.jsonl``: under the ``output_dir`` its YAML names, else ``[job].output_dir``."""
    for word in command:
        if word.endswith((".yaml", ".yml")) and os.path.isfile(word):
            try:
                with open(word) as fh:
                    found = re.search(r"^output_dir:\s*['\"]?([^'\"#\s]+)", fh.read(), re.M)
            except OSError:
                found = None
            if found:
                return os.path.join(found.group(1), "trainer_log.jsonl")
    return os.path.join(fallback_output_dir or ".", "trainer_log.jsonl")


def tail_trainer_log(path: str, out: TextIO, *, offset: int = 0, stop: Optional[threading.Event] = None) -> None:
    """Print each record of ``path`` after byte ``offset`` as a ``progress`` line, as it is appended."""
    pending = ""
    while stop is None or not stop.is_set():
        time.sleep(_TAIL_EVERY_S)
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        if size < offset:  # rewritten (LLaMA-Factory starts it afresh without resume)
            offset = 0
        if size == offset:
            continue
        with open(path) as fh:
            fh.seek(offset)
            pending += fh.read()
            offset = fh.tell()
        *lines, pending = pending.split("\n")
        for line in lines:
            record = llamafactory_record(line)
            if record is not None:
                out.write(format_line(Progress(rank=0, **record)) + "\n")
                out.flush()


def llamafactory_record(line: str) -> Optional[dict[str, Any]]:
    """Progress fields from one ``trainer_log.jsonl`` record (``current_steps``, ``total_steps``, ``loss``, ``lr``, ...)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("current_steps"), int):
        return None
    out: dict[str, Any] = {"step": value["current_steps"]}
    for src, key in (("total_steps", "total_steps"), ("loss", "loss"), ("lr", "learning_rate"), ("learning_rate", "learning_rate"),
                     ("epoch", "epoch")):
        if isinstance(value.get(src), (int, float)) and not isinstance(value.get(src), bool):
            out[key] = value[src]
    return out


def _env_int(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def leave(code: int) -> None:
    """Exit with the code's exit code, as Python would, but without the interpreter's teardown when it is safe.

    After a peer died, a rank's own error was seen replaced at teardown by SIGABRT ("terminate called without an
    active exception": a gloo thread still joinable when torch's static objects are destroyed) — and a rank killed
    by a signal is blamed before the peer whose error it only echoed. So: the script's ``atexit`` handlers run and
    every stream is flushed, as at a normal exit, then the process leaves with ``os._exit``. A script that still has
    a non-daemon thread of its own running gets Python's normal exit, which waits for it.
    """
    import atexit

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    exit_without_teardown(code)


if __name__ == "__main__":
    leave(main())
