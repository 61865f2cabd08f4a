"""The wire between the controller and the node helper (:mod:`nodeside`): names, tags, frames — each rule once.

Both sides import this module: the controller from ``shared/`` as always, the node helper from the bundle it is
shipped in (:mod:`tui.launch.nodecode` puts this file in beside the ``nodeside`` package, under the same name). So
this module is **standard library only and runs on Python 3.8+** (a test parses it with Python 3.8's grammar and
checks its imports); it holds rules and their writers and parsers, no I/O.

**Tags.** Every process of a run carries ``FTWIZ_RUN_ID=<run id>`` and ``FTWIZ_NODE=<node name>`` in its
environment (set by the node's start script): the reapers (the helper's ``kill``, the agent's stop route) match
both exactly, so nodes that share a PID space never touch each other's ranks. Run ids follow
:data:`RUN_ID_PATTERN`, node names :data:`NODE_NAME_PATTERN`: both end up in environment matches and file names
(``<node>.log``), never in a shell.

**Frames.** The helper's ``launch`` and ``follow`` commands answer on stdout one frame a line, ``<letter> <body>``
(:func:`frame` writes, :func:`split_frame` reads)::

    R <run dir>                       launch: the run directory exists (absolute path)
    U                                 launch: the job files are unpacked
    P <pgid> [<leader start time>]    torchrun's process group (start time: /proc/PID/stat field 22)
    L <end offset> <text>             one line of <node>.log, and the byte offset after it
    T <unix time>                     a tick every TICK seconds: the controller's liveness signal
    S <json rows>                     the run's workers on the node (see nodeside.procmatch.worker_samples)
    X <exit code | word>              the end: an exit code, or one of ENDINGS

**The launch exchange** on the helper's stdin: ``payload <n>`` and ``n`` bytes (a tar of the job files), then
``go`` (:func:`payload_header`, :func:`parse_payload_header`, :data:`GO`).

**The run directory** on a node holds, per node (:func:`run_file` names them): ``<node>.sh`` the start script,
``<node>.log`` torchrun's output, ``<node>.pgid`` the process group and its leader's start time (one line, the
``P`` frame's body: :func:`pgid_body`, :func:`parse_pgid`; the start script writes it with :func:`write_pgid_sh`),
``<node>.exit`` torchrun's exit code (one line: :func:`write_exit_sh`, :func:`parse_exit`) and ``<node>.stopped``,
left by an ftwiz stop.

**A start request** (Slurm): the helper does not start the run itself but leaves
``<keepers>/<node>/<run id>.start`` for the node's keeper (:mod:`nodeside.keeper`), a file of two lines, the run
directory and the node name (:func:`start_request`, :func:`parse_start_request`).
"""

from __future__ import annotations

import json
import re  # and no typing (annotations are strings): every helper call on a node pays for its imports

__all__ = [
    "RUN_ID_PATTERN", "NODE_NAME_PATTERN", "RUN_ENV", "NODE_ENV", "KEEPER_ENV",
    "valid_run_id", "valid_node_name",
    "RUNDIR", "UNPACKED", "PGID", "LINE", "TICK", "SAMPLES", "EXIT", "FRAMES",
    "STOPPED", "GONE", "MISSING", "ABORTED", "BAD_PAYLOAD", "ENDINGS",
    "frame", "split_frame",
    "pgid_body", "parse_pgid", "line_body", "parse_line_body", "samples_body", "parse_samples",
    "GO", "payload_header", "parse_payload_header",
    "START_SUFFIX", "start_request", "parse_start_request",
    "SCRIPT", "LOG", "PGID_FILE", "EXIT_FILE", "STOPPED_FILE", "RUN_FILES", "run_file",
    "write_pgid_sh", "write_exit_sh", "parse_exit",
]

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""Run ids: a letter or digit, then up to 63 letters, digits, ``_``, ``.``, ``-``."""
NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""Node names (``[[nodes]] name``, ``FTWIZ_NODE``): a letter or digit, then up to 62 letters, digits, ``_``, ``.``, ``-``."""
RUN_ENV = "FTWIZ_RUN_ID"
"""The environment variable that tags every process of a run with its run id."""
NODE_ENV = "FTWIZ_NODE"
"""The environment variable that tags every process of a run with the node (config name) it runs for."""
KEEPER_ENV = "FTWIZ_KEEPER"
"""Set for the helper on Slurm: the keepers' directory, where ``launch`` leaves its start request."""

_RUN_ID = re.compile(RUN_ID_PATTERN)
_NODE_NAME = re.compile(NODE_NAME_PATTERN)

RUNDIR, UNPACKED, PGID, LINE, TICK, SAMPLES, EXIT = "R", "U", "P", "L", "T", "S", "X"
FRAMES = frozenset((RUNDIR, UNPACKED, PGID, LINE, TICK, SAMPLES, EXIT))
"""Every frame letter (see the module docstring)."""

STOPPED = "stopped"
"""``X stopped``: the process group ended after an ftwiz stop (``<node>.stopped`` is in the run directory)."""
GONE = "gone"
"""``X gone``: the process group vanished without an exit code (signalled by someone else)."""
MISSING = "missing"
"""``X missing``: no log and no process group appeared (the run never started)."""
ABORTED = "aborted"
"""``X aborted``: the launch exchange ended before ``go`` (nothing was started)."""
BAD_PAYLOAD = "bad-payload"
"""``X bad-payload``: the job tar held a link, a device or a path leaving the run directory (nothing was started)."""
ENDINGS = frozenset((STOPPED, GONE, MISSING, ABORTED, BAD_PAYLOAD))
"""The words an ``X`` frame may carry instead of an exit code."""

GO = b"go"
"""The line that starts the run once the job is unpacked; anything else leaves without starting."""
START_SUFFIX = ".start"
"""A start request's file name is the run id and this suffix."""

SCRIPT, LOG, PGID_FILE, EXIT_FILE, STOPPED_FILE = ".sh", ".log", ".pgid", ".exit", ".stopped"
RUN_FILES = frozenset((SCRIPT, LOG, PGID_FILE, EXIT_FILE, STOPPED_FILE))
"""The suffixes of a node's files in the run directory (see the module docstring)."""


def valid_run_id(run_id: str | None) -> bool:
    """True when ``run_id`` follows :data:`RUN_ID_PATTERN` (a full match: no trailing newline)."""
    return bool(_RUN_ID.fullmatch(run_id or ""))


def valid_node_name(name: str | None) -> bool:
    """True when ``name`` follows :data:`NODE_NAME_PATTERN` (a full match: no trailing newline)."""
    return bool(_NODE_NAME.fullmatch(name or ""))


def frame(kind: str, body: str = "") -> str:
    """One frame line (no newline): ``kind`` is a letter of :data:`FRAMES`; a body never holds a newline."""
    if kind not in FRAMES:
        raise ValueError("unknown frame %r; known: %s" % (kind, " ".join(sorted(FRAMES))))
    return kind + " " + body.replace("\n", " ") if body else kind


def split_frame(line: str) -> tuple[str, str]:
    """``(letter, body)`` of a frame line; the letter is ``""`` when the line is not a frame (a shell's complaint)."""
    kind, _, body = line.rstrip("\n").partition(" ")
    return (kind, body) if kind in FRAMES else ("", line.rstrip("\n"))


def pgid_body(pgid: int, started: int | None) -> str:
    """A ``P`` frame's body, and the line of a ``<node>.pgid`` file: the group id and its leader's start time (empty
    when unknown)."""
    return "%d %s" % (pgid, "" if started is None else started)


def parse_pgid(body: str) -> tuple[int, int | None] | None:
    """``(pgid, leader start time or None)`` of a ``P`` frame's body or a ``<node>.pgid`` file, or None when it is not
    one."""
    parts = body.split()
    if not parts or not parts[0].isdigit() or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1]) if len(parts) == 2 else None


def line_body(end_offset: int, text: str) -> str:
    """An ``L`` frame's body: the log's byte offset after the line, and the line (``\\r`` dropped)."""
    return "%d %s" % (end_offset, text.replace("\r", "").replace("\n", " "))


def parse_line_body(body: str) -> tuple[int | None, str]:
    """``(end offset or None when garbled, text)`` of an ``L`` frame's body."""
    offset, _, text = body.partition(" ")
    return (int(offset) if offset.isdigit() else None), text


def samples_body(rows: list[dict]) -> str:
    """An ``S`` frame's body: the worker samples as compact JSON."""
    return json.dumps(rows, separators=(",", ":"))


def parse_samples(body: str) -> list[dict] | None:
    """The rows of an ``S`` frame's body (each with ``rank``, ``pid``, ``state``, ``cpu``, ``io`` and maybe
    ``run_ns``/``wait_ns``), or None when garbled: a sample is never worth a crash."""
    try:
        rows = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return None
    return rows


def run_file(node: str, suffix: str) -> str:
    """The name of ``node``'s file of kind ``suffix`` (one of :data:`RUN_FILES`) in the run directory."""
    if suffix not in RUN_FILES or not valid_node_name(node):
        raise ValueError("no run file %r for node %r; suffixes: %s" % (suffix, node, " ".join(sorted(RUN_FILES))))
    return node + suffix


def write_pgid_sh(rundir: str, node: str) -> str:
    """``sh`` text that writes this shell's pid and its start time (``/proc/$$/stat`` field 22) to ``<node>.pgid`` in
    ``rundir``, atomically (a temporary file, then ``mv``): the line :func:`parse_pgid` reads. Every value quoted."""
    import shlex  # only the controller writes scripts: the helper's calls do not pay for it

    target = rundir.rstrip("/") + "/" + run_file(node, PGID_FILE)
    # the comm field (2) may hold spaces: cut after its closing parenthesis, then field 22 is the 20th left
    return ("echo \"$$ $(sed 's/.*) //' /proc/$$/stat 2>/dev/null | cut -d' ' -f20)\" > %s && mv %s %s"
            % (shlex.quote(target + ".tmp"), shlex.quote(target + ".tmp"), shlex.quote(target)))


def write_exit_sh(rundir: str, node: str, status: str = "$code") -> str:
    """``sh`` text that writes the exit status ``status`` (a shell expansion, ``$code`` by default) to ``<node>.exit``
    in ``rundir``, atomically: the line :func:`parse_exit` reads."""
    import shlex

    if status not in ("$code", "$?"):
        raise ValueError("the exit status is a shell variable ($code or $?), not %r" % status)
    target = rundir.rstrip("/") + "/" + run_file(node, EXIT_FILE)
    return "echo %s > %s && mv %s %s" % (status, shlex.quote(target + ".tmp"), shlex.quote(target + ".tmp"), shlex.quote(target))


def parse_exit(text: str) -> int | None:
    """The exit code in a ``<node>.exit`` file's text, or None when it is not one (half written, garbled)."""
    word = text.strip()
    return int(word) if word.lstrip("-").isdigit() and word.count("-") <= 1 and word[-1:].isdigit() else None


def payload_header(size: int) -> bytes:
    """The launch exchange's header line before ``size`` bytes of job tar."""
    return b"payload %d\n" % size


def parse_payload_header(line: bytes) -> int | None:
    """The size a ``payload <n>`` header line announces, or None when the line is not one."""
    words = line.decode("ascii", "replace").split()
    if len(words) != 2 or words[0] != "payload" or not words[1].isdigit():
        return None
    return int(words[1])


def start_request(rundir: str, node: str) -> str:
    """A start request's content: the run directory (absolute) and the node name, one a line."""
    if "\n" in rundir or not valid_node_name(node):
        raise ValueError("a start request needs a run directory without a newline and a valid node name, not %r, %r" % (rundir, node))
    return "%s\n%s\n" % (rundir, node)


def parse_start_request(text: str) -> tuple[str, str] | None:
    """``(run directory, node name)`` of a start request, or None when it is not one (half written, garbled)."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[2] != "" or not lines[0].startswith("/") or not valid_node_name(lines[1]):
        return None
    return lines[0], lines[1]
