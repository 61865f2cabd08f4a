"""What one running agent holds: settings, the sampler and the probes' shared state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from .probes.compute import ComputeProbe
from .probes.gpu_fixture import FixtureNvml
from .probes.nvml import LiveNvml, NvmlSource
from .probes.tcp import ListenerRegistry
from .report import ReportCache
from .sampler import Sampler
from .settings import AgentSettings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["AgentState", "default_sampler"]


def default_sampler(settings: AgentSettings) -> Sampler:
    """The sampler the command line asks for: live NVML, or the GPU fixture when given."""
    nvml: NvmlSource = FixtureNvml(settings.gpu_fixture) if settings.gpu_fixture else LiveNvml()
    return Sampler(nvml=nvml, interval_s=settings.interval_s, disk_paths=settings.disk_paths, python=settings.python)


@dataclass
class AgentState:
    """Lives on ``app.state.agent`` for the application's lifetime."""

    settings: AgentSettings
    sampler: Sampler
    reports: ReportCache = field(init=False)
    listeners: ListenerRegistry = field(init=False)
    bandwidth_lock: asyncio.Lock = field(init=False)
    compute: ComputeProbe = field(init=False)
    _registry: Optional["CollectorRegistry"] = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.reports = ReportCache(self.sampler, node_name=self.settings.node_name)
        self.listeners = ListenerRegistry(node_name=self.settings.node_name)
        self.bandwidth_lock = asyncio.Lock()
        self.compute = ComputeProbe(self.settings.python)

    @property
    def registry(self) -> "CollectorRegistry":
        """The Prometheus registry, made on the first scrape: prometheus_client is not imported before (~30 ms of
        CPU on the start-up of every agent, a local one on the path of each ftwiz start)."""
        if self._registry is None:
            from .metrics import build_registry

            self._registry = build_registry(self.sampler, node_name=self.settings.node_name)
        return self._registry
