"""What the Cluster screen shows: each node's latest poll and 60 s of utilisation history.

The agent client decides a node's state (up / down / unauthorized / incompatible); this module only
remembers the last answers so sparklines can be drawn, and keeps the order of the config's nodes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Optional

from shared.models import NodeReport

if TYPE_CHECKING:
    from tui.client import NodeStatus

__all__ = ["HISTORY_SECONDS", "ClusterState", "NodeView"]

HISTORY_SECONDS = 60
"""Sparklines cover this many one-second samples."""


@dataclass
class NodeView:
    """A node as the Cluster screen draws it."""

    name: str
    """The node's configured name."""
    host: str
    """Its configured address."""
    state: str = "pending"
    """Latest state from the client; ``pending`` until the first poll answers."""
    report: Optional[NodeReport] = None
    """Latest report; kept (greyed) when the node goes down so its last values stay readable."""
    error: Optional[str] = None
    """Why the node is not up, with the client's fix hint."""
    gpu_util: dict[int, deque] = field(default_factory=dict)
    """Per GPU index: the last 60 utilisation samples (None where the node did not answer)."""
    node_util: deque = field(default_factory=lambda: deque(maxlen=HISTORY_SECONDS))
    """Mean utilisation over the node's GPUs, one sample per poll."""

    @property
    def up(self) -> bool:
        """The agent answered with a usable report."""
        return self.state == "up"


class ClusterState:
    """Nodes in config order with their histories; fed one poll at a time."""

    def __init__(self, nodes: Iterable[tuple[str, str]] = ()) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.polls = 0
        """How many polls have been applied (0: nothing heard yet)."""
        self.set_nodes(nodes)

    def set_nodes(self, nodes: Iterable[tuple[str, str]]) -> None:
        """Follow the config's ``(name, host)`` list: keep known nodes' history, add and drop others."""
        fresh: dict[str, NodeView] = {}
        for name, host in nodes:
            view = self.nodes.get(name)
            if view is None or view.host != host:
                view = NodeView(name=name, host=host)
            fresh[name] = view
        self.nodes = fresh

    def apply(self, statuses: Iterable["NodeStatus"]) -> None:
        """Record one poll of the agent client: every node gets a sample (None when it did not answer)."""
        self.polls += 1
        seen = set()
        for status in statuses:
            view = self.nodes.get(status.node)
            if view is None:
                continue
            seen.add(status.node)
            view.state = getattr(status.state, "value", status.state)
            view.error = " — ".join(part for part in (status.message, status.hint) if part) or None
            if status.report is not None:
                view.report = status.report
            self._sample(view, status.report if view.state == "up" else None)
        for name, view in self.nodes.items():
            if name not in seen:
                self._sample(view, None)

    @staticmethod
    def _sample(view: NodeView, report: Optional[NodeReport]) -> None:
        gpus = report.gpus if report is not None else []
        values = []
        for gpu in gpus:
            history = view.gpu_util.setdefault(gpu.index, deque(maxlen=HISTORY_SECONDS))
            history.append(gpu.utilization_percent)
            if gpu.utilization_percent is not None:
                values.append(gpu.utilization_percent)
        present = {gpu.index for gpu in gpus}
        for index, history in view.gpu_util.items():
            if index not in present:
                history.append(None)
        view.node_util.append(sum(values) / len(values) if values else None)

    def seed_history(self, name: str, node_util: Iterable[Optional[float]], gpu_util: Optional[dict[int, Iterable[Optional[float]]]] = None) -> None:
        """Pre-fill a node's sparklines (fixture mode: a fixed picture for snapshot tests)."""
        view = self.nodes[name]
        view.node_util.extend(node_util)
        for index, values in (gpu_util or {}).items():
            view.gpu_util.setdefault(index, deque(maxlen=HISTORY_SECONDS)).extend(values)
