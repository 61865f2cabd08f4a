"""An agent client that talks to the real agents but holds this machine's changing values still.

Snapshot pictures must not change between runs, yet a real agent reports this machine's load,
uptime, free disk, interfaces and interpreter. :class:`FrozenClient` is the real
:class:`tui.client.AgentClient` (HTTP to the real agents, the same states and errors); after each
report arrives it replaces those host-dependent fields with the fixed constructed ones from
:mod:`tests.tui.fixture_cluster`. GPU values are the agents' own (served from their NVML fixtures),
and ``time_unix`` stays real so the clock-skew check still measures something true.
"""

from __future__ import annotations

from typing import Any

from tests.tui.fixture_cluster import constructed_report
from tui.client import AgentClient, NodeStatus


class FrozenClient(AgentClient):
    """:class:`AgentClient` with host-dependent report fields replaced by fixed values."""

    async def report(self, node: Any) -> NodeStatus:
        status = await super().report(node)
        report = status.report
        if report is None:
            return status
        cfg = self._node(node)
        fixed = constructed_report(report.node_name, cfg.host, None)
        report.hostname = fixed.hostname
        report.host = fixed.host
        report.disks = fixed.disks
        report.nics = fixed.nics
        report.software = fixed.software
        report.ib_ports = [] if not report.gpus else constructed_report(report.node_name, cfg.host, "rtx4090-1x").ib_ports
        report.nvidia_peermem_loaded = True if report.gpus else None
        if report.software is not None:
            report.software.cuda_available = bool(report.gpus)
        return status
