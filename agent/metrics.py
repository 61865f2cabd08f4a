"""Prometheus exposition of the latest sample (``GET /metrics``).

A custom collector reads the sampler's latest sample at scrape time, so a scrape costs no NVML
call. Names follow Prometheus conventions (base units, ``_bytes``, ``_celsius``, ``_watts``,
``_ratio``); per-GPU series carry ``gpu`` (NVML index) and ``uuid`` labels.
"""

from __future__ import annotations

import time
from typing import Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from shared.models import SCHEMA_VERSION, GpuInfo
from shared.version import __version__

from .sampler import Sampler

__all__ = ["SampleCollector", "build_registry", "render", "CONTENT_TYPE"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Classic text format: metric names here are plain ASCII, so it says everything."""

_GPU_LABELS = ["gpu", "uuid"]


def build_registry(sampler: Sampler, *, node_name: str) -> CollectorRegistry:
    """A registry with the sample collector and the agent's own process metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SampleCollector(sampler, node_name=node_name))
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """Text exposition format 0.0.4, which promtool and every Prometheus accept."""
    return generate_latest(registry)


class SampleCollector(Collector):
    """Turns the latest :class:`~agent.sampler.Sample` into metric families."""

    def __init__(self, sampler: Sampler, *, node_name: str) -> None:
        self.sampler = sampler
        self.node_name = node_name

    def collect(self) -> Iterator[Metric]:
        """Yield every family; families without a value on this node are left out."""
        info = InfoMetricFamily("ftwiz_agent", "ftwiz-agent build and node identity.")
        info.add_metric([], {"version": __version__, "schema_version": SCHEMA_VERSION, "node": self.node_name})
        yield info
        sample = self.sampler.latest
        if sample is None:
            return
        yield _gauge("ftwiz_sample_age_seconds", "Seconds since the hardware sample was taken.", max(0.0, time.time() - sample.taken_at))
        yield _gauge("ftwiz_nvml_up", "1 when GPU values are available (live NVML or a fixture), else 0.", 0 if sample.gpu.nvml_error else 1)
        yield from self._host(sample)
        yield from self._gpus(sample.gpu.gpus)
        yield from self._network(sample)

    def _host(self, sample) -> Iterator[Metric]:
        host = sample.host
        if host.memory_total_bytes is not None:
            yield _gauge("ftwiz_node_memory_total_bytes", "Physical memory of the node.", host.memory_total_bytes)
        if host.memory_available_bytes is not None:
            yield _gauge("ftwiz_node_memory_available_bytes", "Memory available without swapping.", host.memory_available_bytes)
        if host.cpu_percent is not None:
            yield _gauge("ftwiz_node_cpu_utilization_ratio", "CPU utilisation over the last sample, all cores (0-1).", host.cpu_percent / 100.0)
        if host.load_avg:
            yield _gauge("ftwiz_node_load1", "1-minute load average.", host.load_avg[0])
        if host.uptime_s is not None:
            yield _gauge("ftwiz_node_uptime_seconds", "Seconds since the node booted.", host.uptime_s)
        free = GaugeMetricFamily("ftwiz_disk_free_bytes", "Bytes available to unprivileged users at a configured path.", labels=["path"])
        total = GaugeMetricFamily("ftwiz_disk_total_bytes", "Size of the filesystem holding a configured path.", labels=["path"])
        for disk in sample.disks:
            if disk.free_bytes is not None:
                free.add_metric([disk.path], disk.free_bytes)
            if disk.total_bytes is not None:
                total.add_metric([disk.path], disk.total_bytes)
        yield free
        yield total

    def _gpus(self, gpus: list[GpuInfo]) -> Iterator[Metric]:
        info = InfoMetricFamily("ftwiz_gpu", "GPU identity.", labels=_GPU_LABELS)
        families = {
            "memory_total_bytes": _gpu_family("ftwiz_gpu_memory_total_bytes", "Framebuffer memory."),
            "memory_used_bytes": _gpu_family("ftwiz_gpu_memory_used_bytes", "Used framebuffer memory."),
            "memory_free_bytes": _gpu_family("ftwiz_gpu_memory_free_bytes", "Free framebuffer memory."),
            "utilization_percent": _gpu_family("ftwiz_gpu_utilization_ratio", "GPU utilisation over the last NVML period (0-1)."),
            "memory_utilization_percent": _gpu_family("ftwiz_gpu_memory_utilization_ratio", "Memory controller utilisation (0-1)."),
            "temperature_c": _gpu_family("ftwiz_gpu_temperature_celsius", "GPU core temperature."),
            "power_draw_w": _gpu_family("ftwiz_gpu_power_watts", "Current power draw."),
            "power_limit_w": _gpu_family("ftwiz_gpu_power_limit_watts", "Enforced power limit."),
            "pcie_gen_current": _gpu_family("ftwiz_gpu_pcie_link_generation", "Current PCIe link generation."),
            "pcie_gen_max": _gpu_family("ftwiz_gpu_pcie_link_generation_max", "Maximum PCIe generation of GPU and slot."),
            "pcie_width_current": _gpu_family("ftwiz_gpu_pcie_link_width_lanes", "Current PCIe link width."),
            "pcie_width_max": _gpu_family("ftwiz_gpu_pcie_link_width_max_lanes", "Maximum PCIe link width."),
            "nvlink_active_links": _gpu_family("ftwiz_gpu_nvlink_active_links", "NVLink links in the active state."),
            "remapped_rows_pending": _gpu_family("ftwiz_gpu_remapped_rows_pending", "1 when a row remap waits for a GPU reset."),
            "remapped_rows_failure": _gpu_family("ftwiz_gpu_remapped_rows_failure", "1 when a row remap failed: the GPU needs service."),
        }
        ecc = CounterMetricFamily(
            "ftwiz_gpu_ecc_volatile_uncorrected_errors", "Uncorrected ECC errors since the last driver load.", labels=_GPU_LABELS
        )
        throttle = GaugeMetricFamily(
            "ftwiz_gpu_throttle_reason", "1 for each active clock throttle reason, by NVML name.", labels=[*_GPU_LABELS, "reason"]
        )
        processes = _gpu_family("ftwiz_gpu_compute_processes", "Compute processes holding memory on the GPU.")
        for gpu in gpus:
            labels = [str(gpu.index), gpu.uuid or ""]
            info.add_metric(labels, {"name": gpu.name or "", "compute_capability": gpu.compute_capability or ""})
            for field_name, family in families.items():
                value = getattr(gpu, field_name)
                if value is None:
                    continue
                if field_name.endswith("_percent"):
                    value = value / 100.0
                family.add_metric(labels, float(value))
            if gpu.ecc_volatile_uncorrected is not None:
                ecc.add_metric(labels, gpu.ecc_volatile_uncorrected)
            for reason in gpu.throttle_reasons:
                throttle.add_metric([*labels, reason], 1)
            processes.add_metric(labels, len(gpu.compute_processes))
        yield info
        yield from families.values()
        yield ecc
        yield throttle
        yield processes

    def _network(self, sample) -> Iterator[Metric]:
        up = GaugeMetricFamily("ftwiz_nic_up", "1 when the interface is up.", labels=["nic"])
        mtu = GaugeMetricFamily("ftwiz_nic_mtu_bytes", "Interface MTU.", labels=["nic"])
        speed = GaugeMetricFamily("ftwiz_nic_speed_bytes_per_second", "Link speed the driver reports.", labels=["nic"])
        for nic in sample.nics:
            if nic.is_up is not None:
                up.add_metric([nic.name], 1 if nic.is_up else 0)
            if nic.mtu is not None:
                mtu.add_metric([nic.name], nic.mtu)
            if nic.speed_mbps is not None:
                speed.add_metric([nic.name], nic.speed_mbps * 1_000_000 / 8)
        ib = GaugeMetricFamily("ftwiz_ib_port_active", "1 when an InfiniBand/RoCE port is ACTIVE.", labels=["device", "port"])
        for port in sample.ib_ports:
            ib.add_metric([port.device, str(port.port)], 1 if port.state == "ACTIVE" else 0)
        yield up
        yield mtu
        yield speed
        yield ib
        if sample.peermem_loaded is not None:
            yield _gauge("ftwiz_nvidia_peermem_loaded", "1 when the nvidia_peermem module (GPUDirect RDMA) is loaded.", int(sample.peermem_loaded))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _gpu_family(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=_GPU_LABELS)

