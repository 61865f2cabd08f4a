"""One thread per node: it owns that node's link (never shared), runs commands on it in order, and
reads the node's framed log stream (the node helper's, :mod:`nodeside.helper`; frames of :mod:`shared.nodewire`)
in between.

The supervisor talks to a :class:`NodeRunner` only through :meth:`NodeRunner.submit` (a command
runs on the runner's thread and its result comes back in a :class:`~concurrent.futures.Future`) and
through the runner's outbox, where it posts typed messages (:mod:`tui.launch.messages`):
``NodeLine``, ``NodePgid``, ``NodeEnded``, ``NodeLost``, ``RankSamples``. ``last_rx`` (the run's clock
at the last byte from the node, ticks included) is the liveness signal: a cut link shows as a
runner whose ``last_rx`` stops moving.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shlex
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator, Optional

from shared import nodewire
from shared.config import ClusterConfig, NodeConfig
from tui.launch.links import LineStream, LinkLost, NodeLink, open_link
from tui.launch.messages import (
    NodeEnded,
    NodeEnding,
    NodeLine,
    NodeLost,
    NodePgid,
    RankSample,
    RankSamples,
    RunnerMessage,
)
from tui.launch.nodecode import helper_command
from tui.launch.plan import Payload, quote_path, rundir_rel, send_payload

__all__ = ["NodeRunner"]


class NodeRunner:
    """The controller's agent for one node (see the module docstring)."""

    def __init__(
        self,
        node: NodeConfig,
        cluster: ClusterConfig,
        run_id: str,
        outbox: "queue.Queue[RunnerMessage]",
        *,
        tick_s: float = 1.0,
        link_factory: Callable[..., NodeLink] = open_link,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.name = node.name
        self.cluster = cluster
        self.run_id = run_id
        self.outbox = outbox
        self.tick_s = tick_s
        self._link_factory = link_factory
        self._clock = clock
        self._commands: "queue.Queue[tuple[Callable[[], Any], Future]]" = queue.Queue()
        self._link: Optional[NodeLink] = None
        self._stream: Optional[LineStream] = None
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=f"ftwiz-node-{node.name}", daemon=True)
        #: ``clock`` time (the run's decision clock) of the last byte from the node's stream (None before streaming).
        self.last_rx: Optional[float] = None
        #: Bytes of the node log consumed so far (where a re-attach resumes).
        self.offset = 0
        #: torchrun's process group on the node, and its leader's start time (``/proc/PID/stat`` field 22):
        #: a stop signals the group only while the leader there still has that start time.
        self.pgid: Optional[int] = None
        self.pgid_start: Optional[int] = None
        #: The node's absolute workdir and run directory, once known.
        self.workdir_abs: Optional[str] = None
        self.rundir_abs: Optional[str] = None
        #: How torchrun ended on the node (None while it runs).
        self.ending: Optional[NodeEnding] = None
        #: True while the log stream runs.
        self.following = False
        #: True after the stream broke without an exit record (the node may still run).
        self.lost = False

    # ------------------------------------------------------------------ thread plumbing

    def start(self) -> "NodeRunner":
        """Start the runner thread."""
        self._thread.start()
        return self

    def submit(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on this runner's thread (after the commands already queued)."""
        future: Future = Future()
        self._commands.put((fn, future))
        return future

    def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        """:meth:`submit` and wait for the result (``TimeoutError`` beyond ``timeout``)."""
        return self.submit(fn).result(timeout=timeout)

    def close(self) -> None:
        """Stop the thread and release the link; the run on the node is left alone."""
        self._closing = True
        self.submit(lambda: None)

    def join(self, timeout: float) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self._closing:
                # A prepared node's exec waits for "go" and says nothing: read only once it runs.
                reading = self._stream is not None and self.following
                self._run_commands(block=not reading)
                if self._stream is not None and self.following:
                    self._read_stream()
        finally:
            self._drop_stream()
            self._drop_link()

    def _run_commands(self, *, block: bool) -> None:
        while True:
            try:
                fn, future = self._commands.get(timeout=0.2) if block else self._commands.get_nowait()
            except queue.Empty:
                return
            block = False
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # the caller decides what a failure means
                future.set_exception(exc)

    # ------------------------------------------------------------------ link

    def connect(self, timeout: Optional[float] = None) -> None:
        """(runner thread) Open the link; raises ``SshError`` / ``OSError``."""
        self._drop_stream()
        self._drop_link()
        self._link = self._link_factory(self.node, self.cluster, timeout=timeout)

    def _need_link(self, timeout: Optional[float] = None) -> NodeLink:
        if self._link is None:
            self.connect(timeout)
        assert self._link is not None
        return self._link

    def _drop_link(self) -> None:
        if self._link is not None:
            link, self._link = self._link, None
            # Closing a transport whose peer vanished can block on the socket: do it off-thread.
            threading.Thread(target=link.close, daemon=True).start()

    def _exec(self, command: str, timeout: float):
        link = self._need_link()
        try:
            return link.exec(command, timeout=timeout)
        except LinkLost:
            self._drop_link()
            raise

    def _helper(self, *args: str, timeout: float) -> dict:
        """Run the node-side helper and decode its JSON answer."""
        result = self._exec(helper_command(self.node.python, *args), timeout)
        try:
            return json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(
                f"{self.name}: the node-side helper failed (exit {result.status}): {(result.stderr or result.stdout).strip()[-400:]}"
                f" — check that python = {self.node.python!r} runs on {self.name}"
            ) from None

    # ------------------------------------------------------------------ commands (runner thread)

    def _launch_command(self) -> str:
        workdir = quote_path(self.node.workdir)
        rel = shlex.quote(rundir_rel(self.run_id))
        helper = helper_command(self.node.python, "launch", self.name, str(self.tick_s))
        # umask 077: the run dir, the job files and the logs hold [job].env / [nccl].env values (an HF_TOKEN)
        return f"exec 2>&1; umask 077; mkdir -p {workdir}/{rel} && chmod 700 {workdir}/{rel} && cd {workdir}/{rel} && exec {helper}"

    def _expect(self, wanted: str, timeout: float, said: list[str]) -> str:
        """Read the launch exchange until a ``wanted`` frame; anything unframed is the node's complaint."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no answer from the node within {timeout:g} s{_said(said)}")
            try:
                line = self._stream.readline(0.5) if self._stream is not None else None
            except EOFError:
                self._drop_stream()
                raise RuntimeError(f"{self.name}: the node ended the launch{_said(said)} — check python = {self.node.python!r} and workdir = {self.node.workdir!r} for {self.name}") from None
            if line is None:
                if self._stream is None:
                    raise RuntimeError(f"{self.name}: the node ended the launch{_said(said)}")
                continue
            self.last_rx = self._clock()
            kind, rest = nodewire.split_frame(line)
            if kind == wanted:
                return rest
            if kind == nodewire.EXIT:
                raise RuntimeError(f"{self.name}: the node refused the job ({rest}){_said(said)}")
            if kind in (nodewire.TICK, nodewire.LINE):
                self._handle(line)
            elif line.strip():
                said.append(line.strip())

    @contextlib.contextmanager
    def _stream_guard(self) -> Iterator[None]:
        """Preparing over the launch exec: any error closes the stream; a lost link is dropped too."""
        try:
            yield
        except LinkLost:
            self._drop_stream()
            self._drop_link()
            raise
        except BaseException:
            self._drop_stream()
            raise

    def open_rundir(self) -> str:
        """Open the node's launch exec: create the run directory and learn its absolute path (the node then
        waits for its job, :meth:`send_job`). Nothing starts until :meth:`launch`; a prepared node whose link
        is closed starts nothing."""
        link = self._need_link()
        said: list[str] = []
        with self._stream_guard():
            self._stream = link.stream(self._launch_command())
            self.rundir_abs = self._expect(nodewire.RUNDIR, 30, said).strip()
            self.workdir_abs = self.rundir_abs[: -len(rundir_rel(self.run_id)) - 1]
        return self.rundir_abs

    def send_job(self, payload: Payload) -> None:
        """Send the node its slice of the launch plan into the run directory :meth:`open_rundir` made."""
        if self._stream is None:
            raise RuntimeError(f"{self.name}: no launch exec open")
        said: list[str] = []
        with self._stream_guard():
            send_payload(self._stream.send, payload)
            self._expect(nodewire.UNPACKED, 60, said)

    def launch(self, timeout: float = 30.0) -> int:
        """Say ``go``: the node starts ``<node>.sh`` in its own session and streams its log. Returns the pgid."""
        if self._stream is None:
            raise RuntimeError(f"{self.name}: not prepared")
        said: list[str] = []
        try:
            self._stream.send(nodewire.GO + b"\n")
            frame = nodewire.parse_pgid(self._expect(nodewire.PGID, timeout, said))
            if frame is None:
                raise RuntimeError(f"{self.name}: the node answered 'go' without a process group{_said(said)}")
            self.pgid, self.pgid_start = frame
        except LinkLost:
            self._drop_stream()
            self._drop_link()
            raise
        self.offset, self.following, self.lost = 0, True, False
        self.last_rx = self._clock()
        self.outbox.put(NodePgid(self.name, self.pgid, self.pgid_start))
        return self.pgid

    def locate(self) -> str:
        """(attach) Find the run directory on the node when the record does not say."""
        rel = rundir_rel(self.run_id)
        result = self._exec(f"cd {quote_path(self.node.workdir)}/{rel} && pwd", timeout=30)
        if result.status != 0:
            raise RuntimeError(f"{self.name}: run {self.run_id} not found under {self.node.workdir}/{rel}")
        self.rundir_abs = result.stdout.strip().splitlines()[-1]
        self.workdir_abs = self.rundir_abs[: -len(rel) - 1]
        return self.rundir_abs

    def follow(self, offset: int) -> None:
        """(Re)start streaming the node log from byte ``offset``."""
        assert self.rundir_abs is not None
        self._drop_stream()
        link = self._need_link()
        try:
            self._stream = link.stream("exec 2>&1; " + helper_command(self.node.python, "follow", self.rundir_abs, self.name, str(offset), str(self.tick_s)))
        except LinkLost:
            self._drop_link()
            raise
        self.offset = offset
        self.following, self.lost = True, False
        self.last_rx = self._clock()

    def reconnect(self, timeout: Optional[float] = None) -> bool:
        """Open a fresh link and resume following where the last stream stopped (unless the node ended)."""
        self.connect(timeout)
        if self.ending is None and self.rundir_abs is not None:
            self.follow(self.offset)
        return True

    def kill(self, grace: float, *, fresh: bool = False, connect_timeout: Optional[float] = None) -> dict:
        """TERM → grace → KILL the run's processes on the node; returns the helper's report.

        ``fresh`` opens a new link first (for a node that was unreachable).
        """
        if fresh or self._link is None:
            self.connect(connect_timeout)
        rundir = self.rundir_abs or f"{self.node.workdir}/{rundir_rel(self.run_id)}"
        # The group goes along only with its leader's start time: the helper signals it only while that matches.
        pgid, started = (str(self.pgid), str(self.pgid_start)) if self.pgid and self.pgid_start is not None else ("", "")
        return self._helper("kill", self.run_id, self.name, str(grace), pgid, rundir, started, timeout=grace + 20)

    def send_signal(self, signame: str) -> dict:
        """Signal the run's workers on the node."""
        return self._helper("signal", self.run_id, self.name, signame, timeout=20)

    def dump_stacks(self) -> dict:
        """Every worker's stack into the node log (SIGUSR1 where handled, py-spy where installed)."""
        return self._helper("dump", self.run_id, self.name, self.rundir_abs or f"{self.node.workdir}/{rundir_rel(self.run_id)}", timeout=60)

    def processes(self) -> list[dict]:
        """The run's processes still on the node."""
        return self._helper("ps", self.run_id, self.name, timeout=20)["processes"]

    # ------------------------------------------------------------------ stream

    def _drop_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            threading.Thread(target=stream.close, daemon=True).start()
        self.following = False

    def _read_stream(self) -> None:
        # Read for a short while, then go back to the command queue.
        deadline = time.monotonic() + 0.3
        while self._stream is not None and time.monotonic() < deadline and self._commands.empty():
            try:
                line = self._stream.readline(0.1)
            except EOFError:
                self._drop_stream()
                if self.ending is None:
                    self.lost = True
                    self.outbox.put(NodeLost(self.name, "the log stream ended without an exit record"))
                return
            except Exception as exc:  # a dying transport can raise anything
                self._drop_stream()
                self.lost = True
                self.outbox.put(NodeLost(self.name, f"{type(exc).__name__}: {exc}"))
                return
            if line is None:
                continue
            self.last_rx = self._clock()
            self._handle(line)

    def _handle(self, line: str) -> None:
        kind, rest = nodewire.split_frame(line)
        if kind == nodewire.LINE:
            offset, text = nodewire.parse_line_body(rest)
            if offset is not None:
                self.offset = offset
            self.outbox.put(NodeLine(self.name, text))
        elif kind == nodewire.TICK:
            pass
        elif kind == nodewire.SAMPLES:
            samples = _samples(rest)
            if samples is not None:
                self.outbox.put(RankSamples(self.name, samples))
        elif kind == nodewire.PGID and (frame := nodewire.parse_pgid(rest)) is not None:
            self.pgid, self.pgid_start = frame
            self.outbox.put(NodePgid(self.name, self.pgid, self.pgid_start))
        elif kind == nodewire.EXIT:
            self.ending = NodeEnding.parse(rest)
            self._drop_stream()
            self.outbox.put(NodeEnded(self.name, self.ending))
        elif line.strip():
            # Not a frame: the helper or the shell complained (a traceback, a missing python).
            self.outbox.put(NodeLine(self.name, f"ftwiz-node-helper: {line}"))


def _samples(text: str) -> Optional[tuple[RankSample, ...]]:
    """An ``S`` frame's rows as samples (None when garbled: a sample is never worth a crash)."""
    rows = nodewire.parse_samples(text)
    if rows is None:
        return None
    try:
        return tuple(RankSample(int(r["rank"]), int(r["pid"]), str(r["state"]), int(r["cpu"]), int(r["io"]),
                                _opt_int(r.get("run_ns")), _opt_int(r.get("wait_ns"))) for r in rows)
    except (ValueError, TypeError, KeyError):
        return None


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def _said(lines: list[str]) -> str:
    return f": {' / '.join(lines)[-400:]}" if lines else ""
