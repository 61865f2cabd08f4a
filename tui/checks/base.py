"""The pieces every check shares: :class:`CheckResult`, :class:`CheckContext` and the registry.

A check is a small function (sync or async) taking a :class:`CheckContext` and returning a list of
:class:`CheckResult`. It is registered with :func:`check` under a stable id; the engine
(:mod:`tui.checks.engine`) runs them all concurrently.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Optional, Union

from pydantic import BaseModel, Field

from shared.config import FtwizConfig, NodeConfig
from shared.models import ConnectProbeResult, NodeReport

if TYPE_CHECKING:  # pragma: no cover - imports for type checkers only
    from tui.client import AgentClient, AgentReply, NodeStatus
    from tui.ssh import SshError

__all__ = [
    "CHECKS",
    "CheckContext",
    "CheckFn",
    "CheckResult",
    "CheckSpec",
    "SshOutcome",
    "Status",
    "check",
]

Status = Literal["pass", "warn", "fail", "skip"]


class CheckResult(BaseModel):
    """One line of the checklist. JSON-able (``model_dump(mode="json")``)."""

    id: str = Field(description="Stable check id, e.g. 'env.parity' or 'rendezvous.reachable'.")
    title: str = Field(description="What was checked, in a few words.")
    status: Status = Field(description="pass, warn (may work), fail (will not work) or skip (could not check).")
    node: Optional[str] = Field(None, description="The node concerned; None for the whole cluster.")
    detail: str = Field("", description="What was found, with the values.")
    hint: str = Field("", description="The exact command or setting that fixes a warn/fail (or enables a skip).")


@dataclass
class SshOutcome:
    """What happened when the engine logged in to a node (in a thread) and looked at its files."""

    node: str
    """Node name."""
    ok: bool
    """Key authentication worked."""
    error: Optional["SshError"] = None
    """Why not, with the hint."""
    skipped: Optional[str] = None
    """Why SSH was not tried (e.g. a local node)."""
    paths: dict[str, bool] = field(default_factory=dict)
    """``test -e`` results on the node, keyed by the path as configured."""
    hf_cache: dict[str, bool] = field(default_factory=dict)
    """Per HF model id: whether the node's HF cache holds it."""
    path_error: Optional[str] = None
    """Why paths could not be tested."""
    seconds: Optional[float] = None
    """Time to connect and authenticate."""


class CheckContext:
    """Everything a check may look at; shared probes are memoised so checks can run concurrently."""

    def __init__(
        self,
        config: FtwizConfig,
        statuses: dict[str, "NodeStatus"],
        client: "AgentClient",
        *,
        ssh: Optional[dict[str, SshOutcome]] = None,
        options: Optional[dict[str, Any]] = None,
    ) -> None:
        self.config = config
        self.statuses = statuses
        """Per node: the agent poll (state, report, timings)."""
        self.client = client
        self.ssh = ssh or {}
        """Per node: SSH outcome (empty when SSH checks are off)."""
        self.options = options or {}
        """Tunables: ``bandwidth_seconds``, ``connect_timeout_s``, ``listen_ttl_s``."""
        self.controller_time = time.time()
        self.notes: dict[str, Any] = {}
        """Facts checks leave for the caller (e.g. ``rendezvous_listener_until``)."""
        self._memo: dict[Any, asyncio.Task] = {}

    # ------------------------------------------------------------------ views

    @property
    def reports(self) -> dict[str, NodeReport]:
        """Reports of the nodes that are up."""
        from tui.client import reports_of

        return reports_of(self.statuses)

    @property
    def master(self) -> NodeConfig:
        """The master node."""
        return self.config.master

    @property
    def single_node(self) -> bool:
        """One node only: cross-node checks do not apply."""
        return len(self.config.nodes) == 1

    def report(self, node: Union[str, NodeConfig]) -> Optional[NodeReport]:
        """``node``'s report, or None when its agent is not up."""
        name = node if isinstance(node, str) else node.name
        status = self.statuses.get(name)
        return status.report if status is not None else None

    def option(self, name: str, default: Any) -> Any:
        """A tunable from ``options``."""
        return self.options.get(name, default)

    def down_skip(self, check_id: str, title: str, node: NodeConfig) -> CheckResult:
        """The row a per-node check gives when the node's agent is not up."""
        status = self.statuses.get(node.name)
        state = status.state.value if status is not None else "unknown"
        return CheckResult(
            id=check_id, title=title, status="skip", node=node.name,
            detail=f"agent {state}: nothing to check", hint="fix the agent.reachable row for this node first",
        )

    # ------------------------------------------------------------------ shared probes

    def memo(self, key: Any, factory: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        """Run ``factory()`` once per ``key``; every caller awaits the same task."""
        task = self._memo.get(key)
        if task is None:
            task = asyncio.ensure_future(factory())
            self._memo[key] = task
        return task

    async def connect_to_master(self, node: NodeConfig) -> "AgentReply[ConnectProbeResult]":
        """``node``'s agent connects to the master's agent port (latency and name resolution); memoised."""
        port = self.config.agent_port(self.master)
        timeout = float(self.option("connect_timeout_s", 3.0))
        return await self.memo(
            ("connect-master", node.name),
            lambda: self.client.probe_connect(node, self.master.host, port, timeout),
        )


CheckFn = Callable[[CheckContext], Union[list[CheckResult], Awaitable[list[CheckResult]]]]


@dataclass
class CheckSpec:
    """A registered check."""

    id: str
    """Id prefix of its results."""
    title: str
    """Short title."""
    fn: CheckFn
    """The function."""
    needs_ssh: bool = False
    """Only meaningful when the engine logged in over SSH."""


CHECKS: list[CheckSpec] = []
"""Every registered check, in display order."""


def check(check_id: str, title: str, *, needs_ssh: bool = False) -> Callable[[CheckFn], CheckFn]:
    """Register a check function under ``check_id``."""

    def register(fn: CheckFn) -> CheckFn:
        CHECKS.append(CheckSpec(check_id, title, fn, needs_ssh))
        return fn

    return register


def result(check_id: str, title: str, status: Status, node: Optional[str] = None, detail: str = "", hint: str = "") -> CheckResult:
    """Shorthand for a :class:`CheckResult`."""
    return CheckResult(id=check_id, title=title, status=status, node=node, detail=detail, hint=hint)
