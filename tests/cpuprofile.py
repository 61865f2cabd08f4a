"""``pytest -p tests.cpuprofile``: CPU seconds per test, the test's own process and every process it started.

The suite is CPU-bound on a 2-core machine, and a test's wall time says little about what it costs: a test
that waits for a node held to a tenth of a core takes minutes of wall time and a minute of CPU, while one
that starts four fine-tuning ranks costs its CPU seconds whatever its duration. Each pytest process (each
xdist worker) moves itself into a cgroup of its own (cgroup v1 ``cpuacct``, else v2), so the sshd, agents,
torchrun and ranks a test starts are counted with it, wherever their network namespace or session; a
process a test moves into a CPU-quota group of its own (``tests/doctor/cgroup.py``) leaves the count on
cgroup v2, whose groups form one tree. CPU a module fixture spends counts toward the test that first uses it.

Opt-in, root only (it needs to create a cgroup): ``make test PYTEST_ARGS="-p tests.cpuprofile"`` prints the
costliest tests and modules after the run and writes every test's ``cpu_s`` and ``wall_s`` as JSON to
``--cpu-profile-json`` (default ``cpu-profile.json`` in the current directory).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

import pytest

_V1 = Path("/sys/fs/cgroup/cpuacct")
_V2 = Path("/sys/fs/cgroup")
_ROWS_KEY = pytest.StashKey[list]()
_GROUP_KEY = pytest.StashKey[Optional[tuple[Path, Path]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile-json", default="cpu-profile.json", help="where tests.cpuprofile writes every test's CPU and wall seconds")
    parser.addoption("--cpu-profile-top", type=int, default=30, help="how many tests and modules tests.cpuprofile prints")


def usage_seconds(group: Path) -> float:
    """CPU seconds the group's processes (and those that left it by ending) have used: v1 ``cpuacct.usage``
    (nanoseconds), v2 ``cpu.stat`` ``usage_usec``."""
    v1 = group / "cpuacct.usage"
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for line in (group / "cpu.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise OSError(f"{group}/cpu.stat has no usage_usec")


def _own_group(name: str) -> tuple[Path, Path]:
    """``(new, old)``: a new cgroup now holding this process (and every process it starts from now on), and the
    one it was in."""
    v1 = (_V1 / "cpuacct.usage").exists()
    root = _V1 if v1 else _V2
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpuacct" in controllers.split(",")) if v1 else controllers == "":
            old = root / path.lstrip("/")
            break
    else:
        raise pytest.UsageError(f"tests.cpuprofile: no {'cpuacct' if v1 else 'cgroup v2'} line in /proc/self/cgroup")
    group = old / name
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group, old


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_ROWS_KEY] = []
    config.stash[_GROUP_KEY] = None
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist") or config.getoption("numprocesses", None) in (None, 0):
        if os.geteuid() != 0:
            raise pytest.UsageError("tests.cpuprofile needs root: it puts the test processes into a cgroup of their own")
        config.stash[_GROUP_KEY] = _own_group(f"ftwiz-cpuprofile-{_worker()}-{os.getpid()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]):
    groups = item.config.stash[_GROUP_KEY]
    if groups is None:
        yield
        return
    group = groups[0]
    cpu, wall = usage_seconds(group), time.monotonic()
    yield
    item.config.stash[_ROWS_KEY].append({"test": item.nodeid, "cpu_s": round(usage_seconds(group) - cpu, 2),
                                         "wall_s": round(time.monotonic() - wall, 2), "worker": _worker()})


def _rows_dir(config: pytest.Config) -> Path:
    """A folder every process of this session shares (the controller's basetemp; a worker's parent)."""
    base = Path(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    return base.parent if hasattr(config, "workerinput") else base


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    groups = config.stash[_GROUP_KEY]
    if groups is None:
        return
    group, old = groups
    (_rows_dir(config) / f"cpu-profile-{_worker()}.json").write_text(json.dumps(config.stash[_ROWS_KEY]))
    try:
        (old / "cgroup.procs").write_text(str(os.getpid()))  # back where it was, so the group can go
        group.rmdir()
    except OSError:
        pass  # a process a test left behind still holds it; it is empty once that one ends


def summary(rows: list[dict], top: int) -> list[str]:
    """The report's lines: the ``top`` costliest tests by CPU seconds, then the modules."""
    total_cpu = sum(r["cpu_s"] for r in rows)
    lines = [f"{len(rows)} tests, {total_cpu:.0f} CPU seconds, {sum(r['wall_s'] for r in rows):.0f} worker seconds"]
    lines.append(f"{'cpu s':>8} {'wall s':>8}  test")
    lines += [f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['test']}" for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]]
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        module = modules[r["test"].partition("::")[0]]
        module[0] += r["cpu_s"]
        module[1] += r["wall_s"]
        module[2] += 1
    lines.append(f"{'cpu s':>8} {'wall s':>8} {'tests':>6}  module")
    lines += [f"{cpu:8.1f} {wall:8.1f} {int(n):6d}  {name}" for name, (cpu, wall, n) in sorted(modules.items(), key=lambda kv: -kv[1][0])[:top]]
    return lines


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    rows = [row for path in sorted(_rows_dir(config).glob("cpu-profile-*.json")) for row in json.loads(path.read_text())]
    if not rows:
        return
    out = Path(config.getoption("cpu_profile_json"))
    out.write_text(json.dumps(sorted(rows, key=lambda r: -r["cpu_s"]), indent=1) + "\n")
    terminalreporter.section("CPU seconds per test (tests.cpuprofile)")
    for line in summary(rows, config.getoption("cpu_profile_top")):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"every test: {out}")
