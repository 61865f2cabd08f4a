"""A memory-limited cgroup for a test process: cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``.

The kernel's OOM killer then kills the process that exceeds the limit and logs it to /dev/kmsg, as it
would on a node that ran out of RAM. Needs root; :func:`cgroup_problem` says why not otherwise.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Self

__all__ = ["CpuCgroup", "MemoryCgroup", "cgroup_problem", "cpu_cgroup_problem", "require_cgroups", "require_cpu_cgroup"]

_V2 = Path("/sys/fs/cgroup")
_V1 = Path("/sys/fs/cgroup/memory")


def _v2_memory() -> bool:
    controllers = _V2 / "cgroup.controllers"
    return controllers.is_file() and "memory" in controllers.read_text().split()


def cgroup_problem() -> str | None:
    """None when a memory cgroup can be made here, else why not."""
    if os.geteuid() != 0:
        return "memory cgroups need root"
    if not _v2_memory() and not (_V1 / "memory.limit_in_bytes").is_file():
        return "no cgroup memory controller (neither v2 memory.max nor v1 memory.limit_in_bytes)"
    if not Path("/dev/kmsg").exists():
        return "no /dev/kmsg to read the OOM killer's record from"
    return None


class MemoryCgroup:
    """``with MemoryCgroup(64 << 20) as cg: cg.add(pid)`` — removed again on exit (after its members died)."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.v2 = _v2_memory()
        self.path = (_V2 if self.v2 else _V1) / f"ftwiz-doctor-{secrets.token_hex(4)}"

    def __enter__(self) -> Self:
        self.path.mkdir()
        limit = "memory.max" if self.v2 else "memory.limit_in_bytes"
        (self.path / limit).write_text(str(self.limit_bytes))
        return self

    def add(self, pid: int) -> None:
        """Move ``pid`` into the cgroup (its later allocations count against the limit)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
                time.sleep(0.2)


def require_cgroups() -> None:
    """Skip a test that needs a memory cgroup when there is none here; under CI=true fail with the reason."""
    from tests.cluster.fixtures import skip_or_fail

    skip_or_fail(cgroup_problem(), "the OOM-kill test")


_V1_CPU = Path("/sys/fs/cgroup/cpu")


def _v2_cpu() -> bool:
    controllers = _V2 / "cgroup.controllers"
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def cpu_cgroup_problem() -> str | None:
    """None when a CPU-quota cgroup can be made here, else why not."""
    if os.geteuid() != 0:
        return "cpu cgroups need root"
    if not _v2_cpu() and not (_V1_CPU / "cpu.cfs_quota_us").is_file():
        return "no cgroup cpu controller (neither v2 cpu.max nor v1 cpu.cfs_quota_us)"
    return None


def require_cpu_cgroup() -> None:
    """Skip a test that holds a process to a CPU quota when no quota can be made here; under CI=true fail instead."""
    from tests.cluster.fixtures import skip_or_fail

    skip_or_fail(cpu_cgroup_problem(), "the CPU-quota test")


class CpuCgroup:
    """``with CpuCgroup(0.2) as cg: cg.add(pid)`` — the members share ``cores`` of CPU time (v2 ``cpu.max``,
    else v1 ``cpu.cfs_quota_us``); a process moved in takes its later children with it. Removed on exit:
    members still alive are moved back to the root group, not killed.

    ``CpuCgroup(None, weight=10_000)`` sets no quota but a weight (v2 ``cpu.weight``, default 100; v1
    ``cpu.shares``, 1 024 for 100): under contention its members get that many times the CPU of a process in the
    root group, so a test's measured process keeps its core on a busy host."""

    PERIOD_US = 20_000  # short periods: the quota bites every step of a fast loop, not in 100 ms bursts

    def __init__(self, cores: float | None, *, weight: int | None = None) -> None:
        # the kernel's least quota is 1 ms
        self.quota_us = None if cores is None else max(1000, int(cores * self.PERIOD_US))
        self.weight = weight
        self.v2 = _v2_cpu()
        self.path = (_V2 if self.v2 else _V1_CPU) / f"ftwiz-cpu-{secrets.token_hex(4)}"

    def __enter__(self) -> Self:
        self.path.mkdir()
        if self.quota_us is not None and self.v2:
            (self.path / "cpu.max").write_text(f"{self.quota_us} {self.PERIOD_US}")
        elif self.quota_us is not None:
            (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        if self.weight is not None and self.v2:
            (self.path / "cpu.weight").write_text(str(self.weight))
        elif self.weight is not None:
            (self.path / "cpu.shares").write_text(str(self.weight * 1024 // 100))
        return self

    def add(self, pid: int) -> None:
        """Move ``pid`` into the group (v1 ``tasks`` moves one thread: every thread of the process is moved)."""
        if self.v2:
            (self.path / "cgroup.procs").write_text(str(pid))
            return
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                (self.path / "tasks").write_text(tid)
            except OSError:
                pass  # a thread that ended meanwhile

    def __exit__(self, *exc: object) -> None:
        root = self.path.parent
        members = "cgroup.procs" if self.v2 else "tasks"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                for pid in (self.path / members).read_text().split():
                    try:
                        (root / members).write_text(pid)
                    except OSError:
                        pass
                time.sleep(0.2)
