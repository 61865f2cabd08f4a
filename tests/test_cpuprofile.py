"""The CPU profile's reading of a cgroup's counters and its report (``tests/cpuprofile.py``)."""

from __future__ import annotations

from tests.cpuprofile import summary, usage_seconds


def test_usage_is_read_from_v1_nanoseconds_and_v2_microseconds(tmp_path):
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert usage_seconds(v1) == 2.5 and usage_seconds(v2) == 1.5


def test_the_report_ranks_tests_and_modules_by_cpu_not_wall():
    rows = [{"test": "tests/a.py::t1", "cpu_s": 5.0, "wall_s": 100.0}, {"test": "tests/a.py::t2", "cpu_s": 1.0, "wall_s": 1.0},
            {"test": "tests/b.py::t", "cpu_s": 30.0, "wall_s": 20.0}]
    lines = summary(rows, top=2)
    assert lines[0] == "3 tests, 36 CPU seconds, 121 worker seconds"
    tests = [line.split()[-1] for line in lines[2:4]]
    assert tests == ["tests/b.py::t", "tests/a.py::t1"]
    modules = lines[5:]
    assert [m.split()[-1] for m in modules] == ["tests/b.py", "tests/a.py"] and modules[1].split()[:3] == ["6.0", "101.0", "2"]
