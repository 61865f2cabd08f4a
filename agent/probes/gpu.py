"""Turn NVML answers into :class:`shared.models.GpuInfo`.

The same code reads the live library and the constructed fixtures, because both are an
:class:`~agent.probes.nvml.NvmlSource`. Values that never change while the driver is loaded
(names, totals, topology) are read once and cached; the rest is read on every sample.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from shared.models import GpuInfo, GpuLink, GpuProcess

from .nvml import NvmlSource

__all__ = ["GpuSample", "GpuProbe", "THROTTLE_REASONS", "TOPOLOGY_LINKS"]

# NVML constants, copied from nvml.h so the mapping does not depend on the pynvml version.
_TEMPERATURE_GPU = 0
_MEMORY_ERROR_TYPE_UNCORRECTED = 1
_VOLATILE_ECC = 0
_FEATURE_ENABLED = 1
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0
_NVLINK_MAX_LINKS = 18  # NVLink 4 (H100) has 18 links; NVML answers an error past the last one.

THROTTLE_REASONS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
"""nvmlClocksEventReason* bits, by their NVML names."""

TOPOLOGY_LINKS: dict[int, str] = {
    0: "same_board",  # NVML_TOPOLOGY_INTERNAL
    10: "same_pcie_switch",  # NVML_TOPOLOGY_SINGLE
    20: "multi_pcie_switch",  # NVML_TOPOLOGY_MULTIPLE
    30: "host_bridge",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "host_bridge",  # NVML_TOPOLOGY_NODE: across host bridges of one NUMA node
    50: "system",  # NVML_TOPOLOGY_SYSTEM: across the CPU interconnect
}
"""nvmlDeviceGetTopologyCommonAncestor levels, as :class:`GpuLink` names them."""


@dataclass(frozen=True)
class GpuSample:
    """GPUs of the node at one instant, or why there are none."""

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None
    nvml_error: Optional[str] = None
    source: Optional[str] = None


@dataclass
class _StaticFacts:
    """Per-GPU values read once: they only change with a driver reload."""

    uuid: Optional[str]
    name: Optional[str]
    memory_total_bytes: Optional[int]
    power_limit_w: Optional[float]
    pcie_gen_max: Optional[int]
    pcie_width_max: Optional[int]
    compute_capability: Optional[str]
    topology: list[GpuLink]


class GpuProbe:
    """Reads every GPU of an :class:`NvmlSource`."""

    def __init__(self, *, nvml: NvmlSource) -> None:
        self.nvml = nvml
        self._lock = threading.Lock()
        self._static: dict[int, _StaticFacts] = {}

    def read(self) -> GpuSample:
        """One sample of all GPUs; never raises on NVML errors."""
        nvml = self.nvml
        error = nvml.init_error()
        if error is not None:
            return GpuSample(nvml_error=error, source=nvml.source)
        count = nvml.query("nvmlDeviceGetCount", default=0) or 0
        handles = [nvml.query("nvmlDeviceGetHandleByIndex", index) for index in range(count)]
        with self._lock:
            gpus = [self._read_one(index, handle, handles) for index, handle in enumerate(handles) if handle is not None]
        return GpuSample(
            gpus=gpus,
            driver_version=nvml.query("nvmlSystemGetDriverVersion"),
            cuda_driver_version=_cuda_version(nvml.query("nvmlSystemGetCudaDriverVersion_v2")),
            nvml_error=None if gpus else "NVML works but reports no GPU on this node",
            source=nvml.source,
        )

    def reset(self) -> None:
        """Forget cached static facts and NVML state (after a driver change)."""
        with self._lock:
            self._static.clear()
        self.nvml.reset()

    def _read_one(self, index: int, handle: Any, handles: list[Any]) -> GpuInfo:
        query = self.nvml.query
        facts = self._static.get(index)
        if facts is None:
            facts = self._static[index] = self._read_static(index, handle, handles)
        memory = query("nvmlDeviceGetMemoryInfo", handle)
        utilization = query("nvmlDeviceGetUtilizationRates", handle)
        remapped = query("nvmlDeviceGetRemappedRows", handle)
        retired_pending = query("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        power_mw = query("nvmlDeviceGetPowerUsage", handle)
        temperature = query("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)
        return GpuInfo(
            index=index,
            uuid=facts.uuid,
            name=facts.name,
            memory_total_bytes=facts.memory_total_bytes or _attr(memory, "total"),
            memory_used_bytes=_attr(memory, "used"),
            memory_free_bytes=_attr(memory, "free"),
            utilization_percent=_float(_attr(utilization, "gpu")),
            memory_utilization_percent=_float(_attr(utilization, "memory")),
            temperature_c=_float(temperature),
            power_draw_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=facts.power_limit_w,
            ecc_volatile_uncorrected=query(
                "nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_TYPE_UNCORRECTED, _VOLATILE_ECC
            ),
            retired_pages_pending=None if retired_pending is None else retired_pending == _FEATURE_ENABLED,
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            remapped_rows_failure=None if remapped is None else bool(remapped[3]),
            pcie_gen_current=query("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            pcie_gen_max=facts.pcie_gen_max,
            pcie_width_current=query("nvmlDeviceGetCurrPcieLinkWidth", handle),
            pcie_width_max=facts.pcie_width_max,
            nvlink_active_links=self._nvlink_active_links(handle),
            throttle_reasons=self._throttle_reasons(handle),
            compute_processes=self._compute_processes(handle),
            topology=facts.topology,
            compute_capability=facts.compute_capability,
        )

    def _read_static(self, index: int, handle: Any, handles: list[Any]) -> _StaticFacts:
        query = self.nvml.query
        memory = query("nvmlDeviceGetMemoryInfo", handle)
        limit_mw = query("nvmlDeviceGetEnforcedPowerLimit", handle)
        capability = query("nvmlDeviceGetCudaComputeCapability", handle)
        return _StaticFacts(
            uuid=query("nvmlDeviceGetUUID", handle),
            name=query("nvmlDeviceGetName", handle),
            memory_total_bytes=_attr(memory, "total"),
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            pcie_gen_max=query("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_width_max=query("nvmlDeviceGetMaxPcieLinkWidth", handle),
            compute_capability=None if capability is None else f"{capability[0]}.{capability[1]}",
            topology=[
                GpuLink(peer_index=peer_index, link=self._link(handle, peer))
                for peer_index, peer in enumerate(handles)
                if peer_index != index and peer is not None
            ],
        )

    def _link(self, handle: Any, peer: Any) -> str:
        # NVLink through NVSwitch shows up only as P2P capability, not as a topology level.
        nvlink = self.nvml.query("nvmlDeviceGetP2PStatus", handle, peer, _P2P_CAPS_INDEX_NVLINK)
        if nvlink == _P2P_STATUS_OK:
            return "nvlink"
        level = self.nvml.query("nvmlDeviceGetTopologyCommonAncestor", handle, peer)
        return TOPOLOGY_LINKS.get(level, "unknown")

    def _nvlink_active_links(self, handle: Any) -> Optional[int]:
        active = None
        for link in range(_NVLINK_MAX_LINKS):
            state = self.nvml.query("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:  # past the last link, or no NVLink at all
                break
            active = (active or 0) + (1 if state == _FEATURE_ENABLED else 0)
        return active

    def _throttle_reasons(self, handle: Any) -> list[str]:
        mask = self.nvml.query("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:  # drivers before the 535 rename
            mask = self.nvml.query("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if not mask:
            return []
        return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]

    def _compute_processes(self, handle: Any) -> list[GpuProcess]:
        processes = self.nvml.query("nvmlDeviceGetComputeRunningProcesses", handle, default=[]) or []
        result = []
        for process in processes:
            pid = _attr(process, "pid")
            if pid is None:
                continue
            used = _attr(process, "usedGpuMemory")
            result.append(
                GpuProcess(
                    pid=pid,
                    name=self.nvml.process_name(pid),
                    used_memory_bytes=used if isinstance(used, int) else None,
                )
            )
        return result


def _attr(value: Any, name: str) -> Any:
    """Field of an NVML struct, ``None`` when the struct is missing."""
    return None if value is None else getattr(value, name, None)


def _float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _cuda_version(value: Optional[int]) -> Optional[str]:
    """NVML encodes CUDA 12.4 as 12040."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
