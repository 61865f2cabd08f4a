"""Background sampling: requests read the latest sample and never wait on NVML or a subprocess.

GPU, host, disk and network values are sampled every ``interval_s`` on one thread; software
versions are probed on another thread at start and on :meth:`Sampler.refresh`.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from shared.models import DiskInfo, HostInfo, IbPort, NicInfo, SoftwareVersions

from .probes import network, system
from .probes.gpu import GpuProbe, GpuSample
from .probes.nvml import NvmlSource
from .probes.software import DEFAULT_TIMEOUT_S, probe_software

__all__ = ["Sample", "Sampler"]

log = logging.getLogger(__name__)

SoftwareProbe = Callable[[str], SoftwareVersions]


@dataclass(frozen=True)
class Sample:
    """Everything the agent reports about the hardware, taken at ``taken_at``."""

    taken_at: float
    hostname: str
    host: HostInfo
    disks: list[DiskInfo]
    gpu: GpuSample
    nics: list[NicInfo] = field(default_factory=list)
    ib_ports: list[IbPort] = field(default_factory=list)
    peermem_loaded: Optional[bool] = None


class Sampler:
    """Keeps the latest :class:`Sample` and software versions fresh in the background."""

    def __init__(
        self,
        *,
        nvml: NvmlSource,
        interval_s: float = 1.0,
        disk_paths: Sequence[str] = (),
        python: str = sys.executable,
        software_probe: Optional[SoftwareProbe] = None,
        software_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.disk_paths = tuple(disk_paths)
        self.python = python
        self.gpu_probe = GpuProbe(nvml=nvml)
        self._software_probe = software_probe or (lambda py: probe_software(py, timeout_s=software_timeout_s))
        self._latest: Optional[Sample] = None
        self._software: Optional[SoftwareVersions] = None
        self._software_done_at = float("-inf")  # monotonic time the last probe finished
        self._software_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def latest(self) -> Optional[Sample]:
        """The most recent sample (``None`` only before :meth:`start`)."""
        return self._latest

    @property
    def software(self) -> Optional[SoftwareVersions]:
        """The last software probe, ``None`` until the first one finishes."""
        return self._software

    def start(self) -> None:
        """Take a first sample now, then keep sampling on background threads."""
        self.sample_now()
        for target, name in ((self._sample_loop, "ftwiz-sampler"), (self.refresh_software, "ftwiz-software")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop sampling; a running software probe is left to its own timeout."""
        self._stop.set()
        for thread in self._threads:
            if thread.name == "ftwiz-sampler":
                thread.join(timeout_s)

    def sample_now(self) -> Sample:
        """Take one sample and make it the latest."""
        sample = Sample(
            taken_at=time.time(),
            hostname=socket.gethostname(),
            host=system.host_info(),
            disks=system.disk_info(self.disk_paths),
            gpu=self.gpu_probe.read(),
            nics=network.nic_info(),
            ib_ports=network.ib_ports(),
            peermem_loaded=network.peermem_loaded(),
        )
        self._latest = sample
        return sample

    def refresh_software(self, *, max_age_s: float = 0.0) -> tuple[Optional[SoftwareVersions], bool]:
        """Probe the training interpreter again, unless a probe finished less than ``max_age_s`` ago.

        Returns the versions and whether a new probe ran. Concurrent callers share one probe.
        """
        if not self._software_lock.acquire(blocking=False):
            with self._software_lock:  # another probe is running: its answer is fresh
                return self._software, True
        try:
            if self._software is not None and time.monotonic() - self._software_done_at < max_age_s:
                return self._software, False
            self._software = self._software_probe(self.python)
            self._software_done_at = time.monotonic()
            return self._software, True
        finally:
            self._software_lock.release()

    def refresh_hardware(self) -> Sample:
        """Re-initialise NVML (a driver may have been installed) and sample now."""
        self.gpu_probe.reset()
        return self.sample_now()

    def _sample_loop(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            try:
                self.sample_now()
            except Exception:  # a probe bug must not stop sampling; the last good sample stays
                log.exception("sampling failed; keeping the previous sample")
            # Fixed schedule: slow samples do not accumulate drift, missed ticks are skipped.
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:
                next_at = now + self.interval_s
