"""Host facts through psutil: CPU, memory, OS, uptime and free disk space.

A thin layer, so the rest of the agent never imports psutil directly. Facts that cannot change
while the agent runs (CPU model, kernel, OS name) are read once.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from typing import Iterable, Optional

import psutil

from shared.models import DiskInfo, HostInfo

__all__ = ["host_info", "disk_info"]


def host_info() -> HostInfo:
    """CPU, memory, load and uptime now (the CPU percentage covers the time since the last call)."""
    memory = psutil.virtual_memory()
    try:
        load_avg = [round(value, 2) for value in psutil.getloadavg()]
    except OSError:
        load_avg = None
    return HostInfo(
        os=_os_pretty_name(),
        kernel=platform.release(),
        uptime_s=round(time.time() - _boot_time(), 1),
        cpu_model=_cpu_model(),
        cpu_cores=psutil.cpu_count(logical=True),
        boot_id=_boot_id(),
        load_avg=load_avg,
        cpu_percent=psutil.cpu_percent(interval=None),
        memory_total_bytes=memory.total,
        memory_available_bytes=memory.available,
    )


def disk_info(paths: Iterable[str]) -> list[DiskInfo]:
    """Free space for each configured path, measured at the path or its nearest existing parent."""
    return [_disk(path) for path in paths]


def _disk(path: str) -> DiskInfo:
    exists = os.path.exists(path)
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)  # a workdir not created yet lives on its parent's filesystem
    try:
        usage = psutil.disk_usage(probe)
    except OSError as error:
        return DiskInfo(path=path, exists=exists, error=f"cannot measure {probe}: {error.strerror or error}")
    return DiskInfo(path=path, exists=exists, total_bytes=usage.total, free_bytes=usage.free)


@functools.cache
def _boot_id() -> Optional[str]:
    """``/proc/sys/kernel/random/boot_id``: one per running kernel, so every container and network namespace on a
    host reads the same one (None off Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            value = handle.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value or None


@functools.cache
def _boot_time() -> float:
    return psutil.boot_time()


@functools.cache
def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip() or None
    except OSError:
        pass
    return platform.processor() or None


@functools.cache
def _os_pretty_name() -> Optional[str]:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8", errors="replace") as release:
                for line in release:
                    key, _, value = line.strip().partition("=")
                    if key == "PRETTY_NAME":
                        return value.strip().strip('"') or None
        except OSError:
            continue
    return f"{platform.system()} {platform.release()}".strip() or None
