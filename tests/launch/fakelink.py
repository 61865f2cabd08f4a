"""A scripted transport for the launch driver: fake nodes behind ``RunOptions.link_factory``, and a fake clock.

The driver (:class:`tui.launch.run.Run`) talks to a node through a link (:mod:`tui.launch.links`): shell
commands that run the node helper (:mod:`nodeside.helper`) and its framed stream (``R``, ``U``, ``P``, ``L``,
``T``, ``X``). :class:`FakeCluster` answers those commands the way the helper would, from a script the
test writes::

    fake = FakeCluster(["a", "b"])
    run = Run(config, options=RunOptions(link_factory=fake.link, ...), clock=fake.clock, network_env={})
    run.launch()                     # every node prepared (R, payload, U), then "go" (P <pgid>)
    fake.nodes["a"].say("hello", rank=0)
    fake.nodes["b"].exit(1)          # X 1: torchrun failed on b
    fake.nodes["b"].cut()            # the link breaks; connects are refused until restore()

Every operation the driver asked of a node is kept, in order, in :attr:`FakeCluster.calls` ("what was
stopped where, in which order"). Time is virtual: :class:`FakeClock` only moves when the test (or a
refused connect, which costs its timeout) advances it, and every advance is atomic for the driver: the
driver's thread cannot read the new time until each node whose stream is live has ticked (``T``) and
its runner has read that tick, so "every node silent" is never a race between the clock and a tick.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from shared.protocol import format_line, make_record
from tui.launch.links import ExecResult, LinkLost

__all__ = ["FakeCluster", "FakeClock", "FakeNode"]

SAFETY_S = 10.0
"""Wall-clock bound on any wait inside the fake (a safety net: a correct test never reaches it)."""


class FakeClock:
    """Virtual monotonic time shared by the driver, its runners and the fake nodes (see the module docstring)."""

    def __init__(self, cluster: "FakeCluster", start: float = 1000.0) -> None:
        self._cluster = cluster
        self._now = start
        self._held = False

    @property
    def now(self) -> float:
        """The current time, never blocking (for the test's own assertions)."""
        return self._now

    def __call__(self) -> float:
        cond = self._cluster.cond
        with cond:
            # The driver waits out an advance in progress; the runners (which stamp the ticks) never do.
            if threading.get_ident() not in self._cluster.transport_threads:
                cond.wait_for(lambda: not self._held, SAFETY_S)
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``; every live node ticks, and its runner reads the tick, before the driver sees it."""
        cluster = self._cluster
        with cluster.cond:
            cond = cluster.cond
            cond.wait_for(lambda: not self._held, SAFETY_S)
            self._held = True
            try:
                self._now += seconds
                me = threading.get_ident()
                live = [s for s in cluster.live_streams() if s.reader != me]
                for stream in live:
                    stream.push(f"T {self._now:.3f}")
                if not cond.wait_for(lambda: all(s.drained() for s in live), SAFETY_S):
                    stuck = [s.node.name for s in live if not s.drained()]
                    raise AssertionError(f"the runner of {stuck} did not read its tick")
            finally:
                self._held = False
                cond.notify_all()


class FakeStream:
    """One long-running helper command (``launch`` or ``follow``) as a :class:`tui.launch.links.LineStream`."""

    def __init__(self, node: "FakeNode", *, launching: bool) -> None:
        self.node = node
        self.cond = node.cluster.cond
        self.frames: list[str] = []
        self.launching = launching
        self.following = not launching
        self.ended = False
        self.closed = False
        self.failure: Optional[BaseException] = None
        self.reader: Optional[int] = None
        self._waiting = False
        self._stdin = b""

    # ------------------------------------------------------------------ the runner's side

    def readline(self, timeout: float) -> Optional[str]:
        with self.cond:
            self.reader = threading.get_ident()
            self.node.cluster.transport_threads.add(self.reader)
            self._waiting = True
            self.cond.notify_all()
            try:
                self.cond.wait_for(lambda: self.frames or self.failure is not None or self.ended or self.closed, timeout)
                if self.frames:
                    return self.frames.pop(0)
                if self.failure is not None:
                    raise self.failure
                if self.ended or self.closed:
                    raise EOFError
                return None
            finally:
                self._waiting = False

    def send(self, data: bytes) -> None:
        with self.cond:
            if self.failure is not None or self.closed:
                raise LinkLost(f"{self.node.name}: fake link is down")
            self._stdin += data
            self._take_stdin()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # ------------------------------------------------------------------ the node's side

    def push(self, frame: str) -> None:
        self.frames.append(frame)
        self.cond.notify_all()

    def live(self) -> bool:
        return self.following and not (self.ended or self.closed or self.failure is not None)

    def drained(self) -> bool:
        return not self.live() or (not self.frames and self._waiting)

    def _take_stdin(self) -> None:
        """The launch exchange (:func:`nodeside.helper.cmd_launch`): ``payload N`` + a tar, then ``go``."""
        node = self.node
        while True:
            line, sep, rest = self._stdin.partition(b"\n")
            if not sep:
                return
            words = line.split()
            if words[:1] == [b"payload"] and node.files is None:
                size = int(words[1])
                if len(rest) < size:
                    return
                with tarfile.open(fileobj=io.BytesIO(rest[:size]), ignore_zeros=True) as tar:  # the node's tar, then shared ones
                    node.files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
                self._stdin = rest[size:]
                node.cluster.record(node.name, "upload")
                self.push("U")
                continue
            self._stdin = rest
            if line.strip() == b"go":
                node.cluster.record(node.name, "go")
                node.running, node.ending = True, None
                self.push(f"P {node.pgid} {node.pgid_start}")
                self.following = True
                for frame in node.on_go:
                    self.push(frame)
            else:
                self.ended = True
                self.push("X aborted")


@dataclass
class FakeNode:
    """One scripted node: what it says, how it ends, whether it answers."""

    name: str
    cluster: "FakeCluster"
    pgid: int
    pgid_start: int = 4242
    """The group leader's start time (``/proc/PID/stat`` field 22) the ``P`` frame carries."""
    ranks: dict[int, int] = field(default_factory=dict)
    """Global rank → worker pid on this node (what a kill reports)."""
    reachable: bool = True
    """False: every connect is refused (after costing ``connect_cost_s`` of virtual time)."""
    connect_cost_s: float = 0.0
    """Virtual seconds a refused connect takes (a black-holed node times out; a refusing one is instant)."""
    remaining: list[int] = field(default_factory=list)
    """Pids a kill reports as still there after SIGKILL."""
    running: bool = False
    ending: Optional[str] = None
    log: list[tuple[int, str]] = field(default_factory=list)
    """The node log: (end offset, line with its ``[rankN]:`` prefix)."""
    files: Optional[dict[str, bytes]] = None
    """The job files the launch sent."""
    on_go: list[str] = field(default_factory=list)
    """Frames sent right after ``P`` on ``go`` (lines logged before the test gets control)."""
    stream: Optional[FakeStream] = None
    refuse_go: bool = False
    stopped_before: bool = False
    """Another ftwiz's stop marker is on the node (``ftwiz --stop`` got here first): what its kill reports."""

    @property
    def rundir(self) -> str:
        return f"/fake/{self.name}/runs/{self.cluster.run_id}"

    # ------------------------------------------------------------------ the script (test thread)

    def say(self, text: str, rank: Optional[int] = None) -> None:
        """One log line from the node (a worker's when ``rank`` is given, torchrun's otherwise)."""
        line = text if rank is None else f"[rank{rank}]:{text}"
        with self.cluster.cond:
            offset = (self.log[-1][0] if self.log else 0) + len(line.encode()) + 1
            self.log.append((offset, line))
            if self.stream is not None and self.stream.live():
                self.stream.push(f"L {offset} {line}")

    def emit(self, kind: str, rank: int, **fields: Any) -> None:
        """A protocol line (``shared.protocol``) from ``rank``."""
        self.say(format_line(make_record(kind, rank=rank, **fields)), rank=rank)

    def exit(self, code: int | str) -> None:
        """torchrun ended on the node with ``code`` (or ``gone``)."""
        with self.cluster.cond:
            self.running, self.ending = False, str(code)
            if self.stream is not None and self.stream.live():
                self.stream.push(f"X {code}")
                self.stream.ended = True

    def cut(self) -> None:
        """The link breaks: the stream fails, execs fail, connects are refused (the run goes on)."""
        with self.cluster.cond:
            self.reachable = False
            for link in self.cluster.links:
                if link.node == self.name:
                    link.alive = False
            if self.stream is not None:
                self.stream.failure = OSError(f"{self.name}: fake link cut")
            self.cluster.cond.notify_all()

    def restore(self) -> None:
        """Connects work again."""
        with self.cluster.cond:
            self.reachable = True


class FakeLink:
    """One connection to a fake node (:class:`tui.launch.links.NodeLink`)."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node.name
        self.fake = node
        self.alive = True

    def _check(self) -> None:
        if not self.alive:
            raise LinkLost(f"{self.node}: fake link is down")

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        cluster = self.fake.cluster
        with cluster.cond:
            cluster.transport_threads.add(threading.get_ident())
            self._check()
            args = _helper_args(command)
            if args is None:  # locate: "cd <rundir> && pwd"
                cluster.record(self.node, "locate")
                return ExecResult(0, self.fake.rundir + "\n", "")
            verb = args[0]
            cluster.record(self.node, verb, *args[1:])
            node = self.fake
            if verb == "kill":
                killed = [{"pid": pid, "rank": rank, "signal": "SIGTERM"} for rank, pid in sorted(node.ranks.items())] if node.running else []
                if node.running:
                    node.running, node.ending = False, "stopped"
                    if node.stream is not None and node.stream.live():
                        node.stream.push("X stopped")
                        node.stream.ended = True
                return _json({"killed": killed, "remaining": list(node.remaining), "stopped_before": node.stopped_before})
            if verb == "dump":
                signalled = [{"pid": pid, "rank": rank} for rank, pid in sorted(node.ranks.items())] if node.running else []
                return _json({"signalled": signalled, "py_spy": [], "no_dump": []})
            if verb == "signal":
                return _json({"signalled": [{"pid": pid, "rank": rank} for rank, pid in sorted(node.ranks.items())]})
            if verb == "ps":
                return _json({"processes": [{"pid": pid, "rank": rank, "cmdline": "python"} for rank, pid in node.ranks.items()] if node.running else []})
            return ExecResult(2, "", f"unknown helper command {verb!r}")

    def stream(self, command: str):
        cluster = self.fake.cluster
        with cluster.cond:
            cluster.transport_threads.add(threading.get_ident())
            self._check()
            args = _helper_args(command) or []
            node = self.fake
            if node.stream is not None:
                node.stream.closed = True
            if args[:1] == ["launch"]:
                cluster.record(self.node, "launch")
                stream = FakeStream(node, launching=True)
                stream.push(f"R {node.rundir}")
            elif args[:1] == ["follow"]:
                offset = int(args[3])
                cluster.record(self.node, "follow", str(offset))
                stream = FakeStream(node, launching=False)
                for end, line in node.log:
                    if end > offset:
                        stream.push(f"L {end} {line}")
                if not node.running:
                    stream.push(f"X {node.ending or 'missing'}")
                    stream.ended = True
            else:
                raise AssertionError(f"unexpected stream command: {command[:200]}")
            node.stream = stream
            return stream

    def close(self) -> None:
        self.alive = False


class FakeCluster:
    """Fake nodes, their links and the virtual clock (see the module docstring)."""

    def __init__(self, names: list[str], *, ranks_per_node: int = 1) -> None:
        self.cond = threading.Condition()
        self.run_id = ""
        self.nodes = {
            name: FakeNode(name, self, pgid=1000 * (i + 1), ranks={i * ranks_per_node + r: 1000 * (i + 1) + r + 1 for r in range(ranks_per_node)})
            for i, name in enumerate(names)
        }
        self.links: list[FakeLink] = []
        self.calls: list[tuple[str, ...]] = []
        """Every operation asked of a node, in order: ``(node, verb, args...)`` (``connect`` for a refused one too)."""
        self.transport_threads: set[int] = set()
        self.clock = FakeClock(self)

    def record(self, node: str, *what: str) -> None:
        self.calls.append((node, *what))

    def link(self, node, cluster, *, timeout: Optional[float] = None) -> FakeLink:
        """The link factory (``RunOptions.link_factory``)."""
        fake = self.nodes[node.name]
        with self.cond:
            self.transport_threads.add(threading.get_ident())
            if not fake.reachable:
                self.record(node.name, "connect", "refused")
                cost = fake.connect_cost_s
            else:
                self.record(node.name, "connect")
                link = FakeLink(fake)
                self.links.append(link)
                return link
        if cost:
            self.clock.advance(cost)
        raise OSError(f"{node.name}: connection refused (fake)")

    def live_streams(self) -> list[FakeStream]:
        return [n.stream for n in self.nodes.values() if n.stream is not None and n.stream.live()]

    def verbs(self, node: str) -> list[str]:
        """What was asked of ``node``, in order (verbs only)."""
        return [c[1] for c in self.calls if c[0] == node]

    def wait(self, predicate, what: str) -> None:
        """Wait (on the fake's condition, not on a timer) until ``predicate()`` holds."""
        with self.cond:
            if not self.cond.wait_for(predicate, SAFETY_S):
                raise AssertionError(f"timed out waiting for {what}")


def _helper_args(command: str) -> Optional[list[str]]:
    """The node helper's arguments in a command built by :func:`tui.launch.nodecode.helper_command` (None: not the
    helper): what follows ``-c <boot> <bundle>``."""
    words = shlex.split(command)
    if "-c" not in words:
        return None
    return words[words.index("-c") + 3:]


def _json(obj: Any) -> ExecResult:
    return ExecResult(0, json.dumps(obj) + "\n", "")
