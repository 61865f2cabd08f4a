"""An agent client that talks to the real agents but holds this machine's changing values still.

Snapshot pictures must not change between runs, yet a real agent reports this machine's load,
uptime, free disk, interfaces and interpreter. :class:`FrozenClient` is the real
:class:`tui.client.AgentClient` (HTTP to the real agents, the same states and errors); after each
report arrives it replaces those host-dependent fields with the fixed constructed ones from
:mod:`tests.tui.fixture_cluster`. GPU values are the agents' own (served from their NVML fixtures),
and ``time_unix`` stays real so the clock-skew check still measures something true.
"""

from __future__ import annotations

from typing import Any, Optional

from shared.models import ComputeDevice, ComputeProbeResult
from tests.tui.fixture_cluster import CONSTRUCTED_PYTHON, FROZEN_TIME, constructed_report
from tui.client import AgentClient, AgentReply, NodeState, NodeStatus

CONSTRUCTED_TFLOPS = {"h100-sxm": 700.0, "rtx4090": 150.0, "cpu": 1.0}
"""Constructed matmul rates (bf16 GPUs, a 64-core CPU in float32), about what such devices measure: a real
probe would time this machine's CPU (it changes between runs) and finds no CUDA behind a GPU fixture."""


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

    async def probe_compute(self, node: Any, *, gpus: Optional[list[int]] = None, threads: Optional[int] = None,
                            timeout_s: float = 60.0) -> AgentReply[ComputeProbeResult]:
        cfg = self._node(node)
        if gpus is None:
            value = ComputeProbeResult(python=CONSTRUCTED_PYTHON, device="cpu", dtype="float32", threads=threads, measured_at=FROZEN_TIME,
                                       devices=[ComputeDevice(name="cpu", tflops=CONSTRUCTED_TFLOPS["cpu"])])
        else:
            kind = "rtx4090" if cfg.name == "node1" else "h100-sxm"  # tests/tui/conftest.py's fixtures
            value = ComputeProbeResult(python=CONSTRUCTED_PYTHON, device="cuda", dtype="bfloat16", measured_at=FROZEN_TIME,
                                       devices=[ComputeDevice(index=i, name=kind, tflops=CONSTRUCTED_TFLOPS[kind]) for i in gpus])
        return AgentReply(cfg.name, NodeState.UP, value=value, status_code=200)
