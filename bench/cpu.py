"""CPU accounting shared by the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["machine_busy_s", "self_cpu_s"]


def machine_busy_s() -> float:
    """CPU seconds every process on this machine has spent so far (``/proc/stat``, all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """User + system CPU seconds of this process (all its threads) so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
