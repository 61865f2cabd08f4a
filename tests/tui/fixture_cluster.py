"""Constructed cluster data for the wizard's tests and benchmark.

GPU values come from the agent's own NVML fixtures (``agent/fixtures/*.json``, constructed from
NVIDIA documentation, not recorded) read through the agent's real :class:`GpuProbe`, so the reports
have exactly the shape a live agent serves. Host, NIC, disk and software values are constructed
here and fixed, so a picture of the screen does not change between runs.

:class:`FixtureClient` answers ``poll()`` like :class:`tui.client.AgentClient` from these reports;
the benchmark uses it (64 nodes × 8 GPUs without 64 processes). The tests use real agents.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Iterable, Optional

from shared.config import FtwizConfig
from shared.models import (
    DiskInfo,
    HostInfo,
    IbPort,
    NicAddress,
    NicInfo,
    NodeReport,
    SoftwareVersions,
)
from shared.version import __version__

FIXTURES = Path(__file__).resolve().parents[2] / "agent" / "fixtures"
FROZEN_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z: a fixed clock for still pictures
GIB = 1024**3
CONSTRUCTED_PYTHON = "/opt/ftwiz/venv/bin/python"
"""The training interpreter the constructed reports describe."""


def gpu_sample(fixture: str):
    """The agent's GPU probe over ``agent/fixtures/<fixture>.json``."""
    from agent.probes.gpu import GpuProbe
    from agent.probes.gpu_fixture import FixtureNvml

    return GpuProbe(nvml=FixtureNvml(FIXTURES / f"{fixture}.json")).read()


def constructed_report(node_name: str, address: str, fixture: Optional[str], *, utilization: Optional[list[float]] = None,
                       nvml_error: str = "NVML Shared Library Not Found (libnvidia-ml.so.1): no NVIDIA driver on this node") -> NodeReport:
    """A full report for ``node_name``: GPUs from ``fixture`` (None: a GPU-less node), the rest fixed."""
    report = NodeReport(
        node_name=node_name,
        hostname=f"{node_name}.lab",
        agent_version=__version__,
        time_unix=FROZEN_TIME,
        sampled_at=FROZEN_TIME,
        host=HostInfo(os="Ubuntu 24.04.1 LTS", kernel="6.8.0-49-generic", uptime_s=86400.0, cpu_model="AMD EPYC 9354 32-Core Processor",
                      cpu_cores=64, load_avg=[0.5, 0.4, 0.3], cpu_percent=3.0, memory_total_bytes=512 * GIB, memory_available_bytes=480 * GIB),
        disks=[DiskInfo(path="~/ftwiz", exists=True, total_bytes=3840 * 10**9, free_bytes=2900 * 10**9),
               DiskInfo(path="~/ftwiz/checkpoints/run", exists=True, total_bytes=3840 * 10**9, free_bytes=2900 * 10**9)],
        nics=[NicInfo(name="lo", addresses=[NicAddress(family="ipv4", address="127.0.0.1", prefixlen=8)], mtu=65536, is_up=True, is_loopback=True),
              NicInfo(name="eth0", addresses=[NicAddress(family="ipv4", address=address, prefixlen=24)], mtu=9000, speed_mbps=100000, is_up=True, default_route=True),
              NicInfo(name="ib0", addresses=[], mtu=4092, speed_mbps=400000, is_up=True)],
        ib_ports=[IbPort(device="mlx5_0", port=1, state="4: ACTIVE", phys_state="5: LinkUp", rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand", netdev="ib0")],
        nvidia_peermem_loaded=True,
        software=SoftwareVersions(python_executable=CONSTRUCTED_PYTHON, python="3.11.9", torch="2.13.0", torch_cuda="12.4", cuda_available=True,
                                  nccl="2.21.5", transformers="5.2.0", peft="0.21.0", bitsandbytes="0.50.0", accelerate="1.10.0", probed_at=FROZEN_TIME),
    )
    if fixture is None:
        report.nvml_error = nvml_error
        report.software.cuda_available = False
        report.ib_ports = []
        report.nvidia_peermem_loaded = None
        return report
    sample = gpu_sample(fixture)
    report.gpus = copy.deepcopy(sample.gpus)
    report.driver_version = sample.driver_version
    report.cuda_driver_version = sample.cuda_driver_version
    report.gpu_source = sample.source
    for gpu, value in zip(report.gpus, utilization or []):
        gpu.utilization_percent = value
    return report


def wave(step: int, index: int, node: int = 0) -> float:
    """A deterministic utilisation in 0..100 that moves with ``step`` (a busy-looking cluster)."""
    return round(50 + 45 * math.sin((step + 3 * index + 7 * node) / 6.0), 1)


class FixtureClient:
    """Answers ``poll()`` like :class:`tui.client.AgentClient`, from constructed reports.

    ``down`` names nodes that answer as down (an unreachable agent); ``step`` advances the
    utilisation wave at every poll so the sparklines move.
    """

    def __init__(self, config: FtwizConfig, fixtures: dict[str, Optional[str]], *, down: Iterable[str] = (), moving: bool = True) -> None:
        self.config = config
        self.down = set(down)
        self.moving = moving
        self.step = 0
        self._base = {n.name: constructed_report(n.name, n.host, fixtures.get(n.name)) for n in config.nodes}
        self.polls = 0

    async def poll(self) -> dict:
        """Every node's status, like the real client (no network)."""
        from tui.client import NodeState, NodeStatus

        self.polls += 1
        out = {}
        for node_index, node in enumerate(self.config.nodes):
            url = f"http://{node.host}:{self.config.agent_port(node)}"
            if node.name in self.down:
                out[node.name] = NodeStatus(node.name, url, NodeState.DOWN, f"connection to {url} refused: no agent listening",
                                            f"start the agent on {node.name}")
                continue
            report = self._base[node.name].model_copy()
            if self.moving:
                report.gpus = [gpu.model_copy(update={"utilization_percent": wave(self.step, gpu.index, node_index)}) for gpu in report.gpus]
            out[node.name] = NodeStatus(node.name, url, NodeState.UP, report=report)
        self.step += 1
        return out

    async def aclose(self) -> None:
        """Nothing to close."""


def fixture_config(nodes: int, *, prefix: str = "node", subnet: str = "10.0.0") -> FtwizConfig:
    """A config of ``nodes`` nodes at ``subnet.(index+1)``."""
    return FtwizConfig.model_validate({
        "cluster": {"name": "fixture"},
        "nodes": [{"name": f"{prefix}{i}", "host": f"{subnet}.{i + 1}"} for i in range(nodes)],
    })
