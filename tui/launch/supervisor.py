"""The supervisor's decisions, as a pure core: typed observations in, one decision out.

No threads, SSH, sleeps or clock here: the driver (:mod:`tui.launch.run`) feeds what its runners
saw (:mod:`tui.launch.messages`), what the progress model saw (a rank moved, a rank reached the
process group), what the operator asked (stop, detach), and the time from its injected clock; then
asks :meth:`Supervisor.decide` what to do now:

``Keep``       go on (and re-open the links named, announce node states, write notes);
``StallFound`` a stall or a hang: dump every rank's stack, then stop (the driver does both);
``StopAll``    stop every rank everywhere (reason, status, whom to blame, unreachable nodes);
``Detach``     stop supervising, leave the run going;
``Succeed``    every node's torchrun exited 0.

Phases (``Phase``): RUNNING → OFFLINE when every node went silent at once (our side's network is
the likely cause: leave the run alone, re-attach) → RETURNING while they answer again (a grace
before a still-silent node counts as dead) → RUNNING; any decision other than ``Keep`` ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Optional

from shared.torchrun_failures import describe_worker_exit
from tui.exitcodes import EXIT_FAILED, EXIT_OK
from tui.launch.activity import ActivityTracker, hang_before_first_step
from tui.launch.events import RunNodeState
from tui.launch.messages import EndingKind, NodeEnding, RankSample
from tui.runs.status import RunStatus

__all__ = ["Detach", "Decision", "Keep", "SupervisedNode", "Phase", "StallFound", "StopAll", "Succeed", "Supervisor", "Timing", "WorkerFailure"]


class Phase(str, Enum):
    """Where supervision stands (see the module docstring)."""

    WAITING = "waiting"
    """Not started yet (launch or attach under way)."""
    RUNNING = "running"
    OFFLINE = "offline"
    RETURNING = "returning"
    OVER = "over"


@dataclass(frozen=True)
class Timing:
    """The windows the decisions use, in seconds."""

    unreachable_after_s: float
    """Silence after which a node counts as not answering."""
    tick_s: float
    """How often a node helper ticks."""
    reattach_for_s: float
    """Every node silent: how long to wait for them before detaching."""
    reconnect_s: float
    """One reconnect attempt's timeout (the returning grace is built from it)."""
    stall_timeout_s: float
    """No progress or heartbeat from a rank for this long is a stall; also the hang window before step 1."""
    first_step_grace_s: float
    """Before the first step, the longest a run may show no progress while its ranks still move."""
    error_grace_s: float = 2.0
    """A rank said it failed (an ``error`` line): how long torchrun gets to report the node's failure
    itself (its report names a rank killed by a signal, which the erroring peers may only echo)."""


@dataclass(frozen=True)
class WorkerFailure:
    """torchrun said a worker died (``failed (exitcode: N) local_rank: L (pid: P)``)."""

    node: str
    rank: Optional[int]
    local_rank: int
    exitcode: int


@dataclass(frozen=True)
class Keep:
    """Go on supervising."""

    reconnect: tuple[str, ...] = ()
    """Nodes whose link should be re-opened (unless an attempt is under way)."""
    states: tuple[tuple[str, RunNodeState], ...] = ()
    """Node states to announce."""
    notes: tuple[tuple[str, str], ...] = ()
    """(level, text) notes for the operator."""


@dataclass(frozen=True)
class StopAll:
    """Stop every rank on every node."""

    reason: str
    status: RunStatus
    trigger_node: Optional[str] = None
    trigger_rank: Optional[int] = None
    unreachable: tuple[str, ...] = ()
    stalled: tuple[int, ...] = ()


@dataclass(frozen=True)
class StallFound:
    """No progress (or a hang before step 1): dump stacks, then stop naming ``suspects``."""

    stalled: tuple[int, ...]
    suspects: tuple[int, ...]
    reason: str
    before_first_step: bool


@dataclass(frozen=True)
class Detach:
    """Leave the run going without supervision."""

    reason: str
    exit_code: int = EXIT_OK


@dataclass(frozen=True)
class Succeed:
    """Every node's torchrun exited 0."""


Decision = Keep | StopAll | StallFound | Detach | Succeed


@dataclass
class SupervisedNode:
    """What the supervisor knows of one node."""

    name: str
    ending: Optional[NodeEnding] = None
    last_rx: Optional[float] = None
    """Clock time of the last byte from the node (ticks included)."""
    lost: bool = False
    """The stream broke without an ending; a reconnect is due."""


@dataclass
class Supervisor:
    """The decisions of one run over a fixed set of nodes (see the module docstring)."""

    nodes: dict[str, SupervisedNode]
    timing: Timing
    expected_ranks: Optional[int] = None
    """The world size when known (every rank must be seen before "every rank is idle" can hold)."""
    phase: Phase = Phase.WAITING
    started_at: Optional[float] = None
    stop_reason: Optional[str] = None
    ended_by_backend: Optional[str] = None
    """Why the backend ended every node (Slurm's time limit, a node failure); nothing of the run is left."""
    detach_requested: bool = False
    stopped_elsewhere: bool = False
    worker_failure: Optional[WorkerFailure] = None
    rank_error: Optional[tuple[str, Optional[int], str, float]] = None
    """The first ``error`` line: (node, rank, message, when)."""
    exit_order: list[str] = field(default_factory=list)
    last_moved: dict[int, float] = field(default_factory=dict)
    """Global rank → when its last progress or heartbeat line came."""
    reached: set[int] = field(default_factory=set)
    """Ranks that said they joined the process group."""
    activity: ActivityTracker = field(default_factory=ActivityTracker)
    offline_since: Optional[float] = None
    back_since: Optional[float] = None

    @classmethod
    def over(cls, names: Iterable[str], timing: Timing, *, expected_ranks: Optional[int] = None) -> "Supervisor":
        """A supervisor for the nodes ``names``."""
        return cls({n: SupervisedNode(n) for n in names}, timing, expected_ranks)

    # ------------------------------------------------------------------ observations

    def started(self, now: float) -> None:
        """torchrun runs on every node (or every node was re-attached)."""
        self.started_at = now
        self.phase = Phase.RUNNING
        for view in self.nodes.values():
            view.last_rx = now if view.last_rx is None else view.last_rx

    def heard(self, node: str, now: float) -> None:
        """A byte came from ``node``."""
        self.nodes[node].last_rx = now

    def ended(self, node: str, ending: NodeEnding) -> None:
        """torchrun ended on ``node``."""
        self.nodes[node].ending = ending
        self.exit_order.append(node)
        if ending.kind is EndingKind.STOPPED:
            self.stopped_elsewhere = True

    def lost(self, node: str) -> None:
        """``node``'s stream broke without an ending."""
        self.nodes[node].lost = True

    def relinked(self, node: str, now: float) -> None:
        """``node``'s link was re-opened and its stream follows again."""
        view = self.nodes[node]
        view.lost, view.last_rx = False, now

    def worker_failed(self, failure: WorkerFailure) -> None:
        """torchrun reported a dead worker (the first one counts)."""
        if self.worker_failure is None:
            self.worker_failure = failure

    def rank_errored(self, node: str, rank: Optional[int], message: str, now: float) -> None:
        """A rank printed an ``error`` line: it is failing (the first one counts)."""
        if self.rank_error is None:
            self.rank_error = (node, rank, message, now)

    def rank_moved(self, rank: int, now: float) -> None:
        """A progress or heartbeat line from ``rank``."""
        self.last_moved[rank] = now

    def rank_reached(self, rank: int) -> None:
        """``rank`` joined the process group (its ``started`` line)."""
        self.reached.add(rank)

    def sampled(self, node: str, samples: Iterable[RankSample], now: float) -> None:
        """The node helper's process samples of ``node``'s workers."""
        self.activity.observe(node, samples, now)

    def request_stop(self, reason: str) -> None:
        """The operator asked to stop."""
        self.stop_reason = reason

    def allocation_ended(self, reason: str) -> None:
        """The backend ended the run's nodes (the first reason counts)."""
        if self.ended_by_backend is None:
            self.ended_by_backend = reason

    def request_detach(self) -> None:
        """The operator asked to detach."""
        self.detach_requested = True

    # ------------------------------------------------------------------ the decision

    def decide(self, now: float) -> Decision:
        """What to do at ``now``."""
        decision = self._decide(now)
        if not isinstance(decision, Keep):
            self.phase = Phase.OVER
        return decision

    def _decide(self, now: float) -> Decision:
        if self.stop_reason is not None:
            return StopAll(self.stop_reason, RunStatus.STOPPED)
        if self.ended_by_backend is not None:
            return StopAll(self.ended_by_backend, RunStatus.FAILED)
        if self.detach_requested:
            return Detach("detached: the run goes on without supervision")
        if self.stopped_elsewhere:
            return StopAll("stopped from another ftwiz (ftwiz --stop)", RunStatus.STOPPED)
        failed = [v for v in self.nodes.values() if v.ending is not None and v.ending.failed]
        if failed:
            first = min(failed, key=lambda v: self.exit_order.index(v.name) if v.name in self.exit_order else len(self.exit_order))
            assert first.ending is not None
            return StopAll(f"torchrun on {first.name} {first.ending.describe()}", RunStatus.FAILED, trigger_node=first.name)
        if self.worker_failure is not None:
            # torchrun said a worker died: with --max-restarts=0 that node is going down; act now.
            f = self.worker_failure
            who = f"rank {f.rank}" if f.rank is not None else f"local rank {f.local_rank}"
            return StopAll(f"{who} on {f.node} {describe_worker_exit(f.exitcode)}", RunStatus.FAILED, trigger_node=f.node)
        if self.rank_error is not None and now - self.rank_error[3] >= self.timing.error_grace_s:
            node, rank, message, _ = self.rank_error
            who = f"rank {rank}" if rank is not None else "a rank"
            return StopAll(f"{who} on {node} failed: {message}", RunStatus.FAILED, trigger_node=node)
        active = [v for v in self.nodes.values() if v.ending is None]
        if not active:
            return Succeed()
        return self._links(active, now)

    def _links(self, active: list[SupervisedNode], now: float) -> Decision:
        t = self.timing
        lost = tuple(v.name for v in active if v.lost)
        silent = [v for v in active if v.last_rx is None or now - v.last_rx > t.unreachable_after_s]
        if silent and len(silent) == len(active):
            notes: tuple[tuple[str, str], ...] = ()
            states: tuple[tuple[str, RunNodeState], ...] = ()
            if self.offline_since is None:
                self.offline_since, self.back_since, self.phase = now, None, Phase.OFFLINE
                notes = (("warn", "every node stopped answering at once: the network on this side is probably down. The run "
                                  f"is left going; re-attaching as the nodes answer (up to {t.reattach_for_s:.0f} s)"),)
                states = tuple((v.name, RunNodeState.RECONNECTING) for v in active)
            if now - self.offline_since > t.reattach_for_s:
                return Detach(f"lost contact with every node for {t.reattach_for_s:.0f} s; the run may still be going", EXIT_FAILED)
            return Keep(reconnect=tuple(v.name for v in active), states=states, notes=notes)
        if self.offline_since is not None:
            # Coming back: give every node time to re-attach before calling a silent one dead.
            if self.back_since is None:
                self.back_since, self.phase = now, Phase.RETURNING
            if silent and now - self.back_since < t.unreachable_after_s + t.reconnect_s * 2:
                return Keep(reconnect=tuple(v.name for v in silent))
            self.offline_since = self.back_since = None
            self.phase = Phase.RUNNING
            for rank in self.last_moved:  # the silence was ours, not the ranks'
                self.last_moved[rank] = now
            self.activity.resume_all(now)
            return Keep(states=tuple((v.name, RunNodeState.RUNNING) for v in active), notes=(("info", "every node answers again; supervision resumed"),))
        # Ticks come once a tick per node, each on its own phase: a node counts as answering only if
        # heard within a few ticks, so an all-nodes drop is not mistaken for one node's.
        answering = [v for v in active if v not in silent and v.last_rx is not None and now - v.last_rx < 2.5 * t.tick_s + 0.5]
        if silent and answering:
            node = silent[0]
            since = now - (node.last_rx if node.last_rx is not None else now)
            return StopAll(
                f"{node.name} stopped answering (nothing for {since:.0f} s over SSH) while the other nodes still answer",
                RunStatus.FAILED,
                trigger_node=node.name,
                unreachable=tuple(v.name for v in silent),
            )
        if silent:
            return Keep(reconnect=lost)  # the others went quiet too: likely our side's network; see next round
        stall = self._stall(now)
        if stall is not None:
            return stall
        return Keep(reconnect=lost)

    def _stall(self, now: float) -> Optional[StallFound]:
        t = self.timing
        if self.started_at is None:
            return None
        moved = self.last_moved
        if not moved:
            hang = hang_before_first_step(self.activity.ranks, now, t.stall_timeout_s, expected_ranks=self.expected_ranks, reached=self.reached)
            if hang is not None:
                who = ", ".join(map(str, hang.ranks))
                return StallFound(tuple(sorted(self.activity.ranks)), hang.ranks, f"hang before the first step: rank(s) {who} {hang.why}", True)
            if now - self.started_at > t.first_step_grace_s:
                ranks = tuple(sorted(set(self.reached) | set(self.activity.ranks)))
                who = ", ".join(map(str, ranks)) if ranks else "every rank"
                return StallFound(ranks, ranks[:1], f"stall: rank(s) {who} made no progress for {t.first_step_grace_s:.0f} s (job.first_step_grace_s)", True)
            return None
        if not any(now - at > t.stall_timeout_s for at in moved.values()):
            return None
        # The first rank past the timeout triggers; name every rank that has been still for a good
        # while too (a hang stops its peers within a step, so their silences differ by moments).
        stalled = tuple(sorted(r for r, at in moved.items() if now - at > t.stall_timeout_s / 2))
        stopped = tuple(sorted(r for r, a in self.activity.ranks.items() if a.stopped_since is not None))
        who = ", ".join(map(str, stalled))
        odd = f"; rank(s) {', '.join(map(str, stopped))} stopped (process state T)" if stopped else ""
        return StallFound(stalled, stopped or stalled[:1], f"stall: rank(s) {who} made no progress for {t.stall_timeout_s:.0f} s (job.stall_timeout_s){odd}", False)
