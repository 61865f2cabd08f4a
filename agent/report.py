"""Assemble :class:`shared.models.NodeReport` from the latest sample, cheaply per request."""

from __future__ import annotations

import threading
import time
from typing import Optional

from shared.models import NodeReport, SoftwareVersions
from shared.version import __version__

from .sampler import Sample, Sampler

__all__ = ["build_report", "ReportCache"]


def build_report(sample: Sample, software: Optional[SoftwareVersions], *, node_name: str, now: float) -> NodeReport:
    """The report for one sample, served at time ``now``."""
    return NodeReport(
        node_name=node_name,
        hostname=sample.hostname,
        agent_version=__version__,
        time_unix=now,
        sampled_at=sample.taken_at,
        host=sample.host,
        disks=sample.disks,
        gpus=sample.gpu.gpus,
        driver_version=sample.gpu.driver_version,
        cuda_driver_version=sample.gpu.cuda_driver_version,
        nvml_error=sample.gpu.nvml_error,
        gpu_source=sample.gpu.source,
        nics=sample.nics,
        ib_ports=sample.ib_ports,
        nvidia_peermem_loaded=sample.peermem_loaded,
        software=software,
    )


class ReportCache:
    """Serialises each sample once; a request only splices in its own ``time_unix``.

    Every request must carry the agent's current clock (the controller checks clock skew), but
    re-serialising eight GPUs per request would cost more than the rest of the request.
    """

    _TIME_FIELD = '"time_unix":-1.0'

    def __init__(self, sampler: Sampler, *, node_name: str) -> None:
        self.sampler = sampler
        self.node_name = node_name
        self._lock = threading.Lock()
        self._source: tuple[Optional[Sample], Optional[SoftwareVersions]] = (None, None)
        self._parts: tuple[bytes, bytes] = (b"", b"")

    def report_json(self, now: Optional[float] = None) -> bytes:
        """The current report as JSON bytes."""
        sample, software = self.sampler.latest, self.sampler.software
        if sample is None:
            sample = self.sampler.sample_now()
        with self._lock:
            if sample is not self._source[0] or software is not self._source[1]:
                self._parts = self._split(build_report(sample, software, node_name=self.node_name, now=-1.0))
                self._source = (sample, software)
            head, tail = self._parts
        stamp = time.time() if now is None else now
        return head + repr(float(stamp)).encode() + tail

    def _split(self, report: NodeReport) -> tuple[bytes, bytes]:
        # Strings are JSON-escaped, so the bare key can only be the real field.
        head, found, tail = report.model_dump_json().partition(self._TIME_FIELD)
        if not found:  # pragma: no cover - guards a pydantic serialisation change
            raise RuntimeError("time_unix not found in the serialised report")
        return (head + '"time_unix":').encode(), tail.encode()
