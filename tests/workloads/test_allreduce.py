"""The all-reduce check under real torchrun on loopback (gloo, CPU)."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time

import psutil
import pytest

from shared.protocol import Started
from tests.workloads.helpers import (
    PACKAGE,
    finish,
    free_port,
    kill_group,
    parse_records,
    run,
    start,
    torchrun_argv,
    write_spec,
)

pytestmark = pytest.mark.slow
SIZES_MB = [0.25, 1]


def test_two_ranks_sum_correctly_and_report_bandwidth(rundir, tmp_path):
    spec = write_spec(tmp_path, workload="allreduce", sizes_mb=SIZES_MB, iterations=3, warmup_iterations=1, pause_s=1.0)
    result = run(torchrun_argv(spec, nproc=2), rundir, timeout=120)
    assert result.returncode == 0, result.output
    beats = sorted(r.time for r in result.kind("heartbeat") if r.rank == 0)
    assert len(beats) == len(SIZES_MB) and beats[1] - beats[0] >= 1.0, beats  # pause_s after each size (a lower bound)
    started = result.kind("started")
    assert sorted(r.rank for r in started) == [0, 1]
    assert {r.world_size for r in started} == {2} and {r.backend for r in started} == {"gloo"}
    rows = result.kind("allreduce")
    assert [r.size_bytes for r in rows] == [262144, 1048576]
    for row in rows:
        assert row.rank == 0 and row.correct is True and row.world_size == 2
        assert row.time_us > 0 and row.algbw_gbps > 0
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * (2 - 1) / 2, rel=1e-3)
    assert sorted(r.rank for r in result.kind("done")) == [0, 1]
    assert "busbw(GB/s)" in result.stdout  # rank 0's human table
    assert "Traceback" not in result.output


def test_heterogeneous_two_plus_one_agents(rundir, tmp_path):
    """Two torchrun agents (2 and 1 processes) meeting in a c10d rendezvous: world size 3, ranks 0..2 once."""
    spec = write_spec(tmp_path, workload="allreduce", sizes_mb=[0.25], iterations=2, warmup_iterations=0)
    port = free_port()

    def agent(nproc: int, is_host: bool) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={nproc}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=hetero-test",
                f"--rdzv-conf=is_host={'true' if is_host else 'false'}", "--local-addr=127.0.0.1",
                "-m", PACKAGE, "--spec", str(spec)]

    host = start(agent(2, True), rundir)
    other = start(agent(1, False), rundir)
    try:
        results = [finish(host, timeout=150), finish(other, timeout=150)]
    finally:
        kill_group(host)
        kill_group(other)
    for result in results:
        assert result.returncode == 0, result.output
    started = [r for result in results for r in result.kind("started")]
    assert sorted(r.rank for r in started) == [0, 1, 2]
    assert {r.world_size for r in started} == {3}
    assert sorted(r.local_world_size for r in started) == [1, 2, 2]
    rows = [r for result in results for r in result.kind("allreduce")]
    assert len(rows) == 1 and rows[0].correct is True and rows[0].world_size == 3
    assert rows[0].busbw_gbps == pytest.approx(rows[0].algbw_gbps * 4 / 3, rel=1e-3)


def test_sigusr1_dumps_every_thread_stack(rundir, tmp_path):
    """The launcher's stall handling signals a rank before stopping it: the stack must reach stderr."""
    spec = write_spec(tmp_path, workload="allreduce", sizes_mb=[1], iterations=100_000, warmup_iterations=0)
    proc = start(torchrun_argv(spec, nproc=2), rundir)
    errors: list[str] = []
    threading.Thread(target=lambda: [errors.append(line) for line in proc.stderr], daemon=True).start()
    try:
        pids = _started_pids(proc, count=2, timeout=90)
        # "started" comes before the rank enters allreduce.py: signal again until a dump shows it there (each
        # dump reaches stderr at once; a loaded host may only delay the rank's arrival in the loop)
        deadline = time.monotonic() + 60
        while "allreduce.py" not in "".join(errors) and time.monotonic() < deadline:
            os.kill(pids[1], signal.SIGUSR1)
            shown = time.monotonic() + 2
            while "allreduce.py" not in "".join(errors) and time.monotonic() < shown:
                time.sleep(0.05)
    finally:
        kill_group(proc)
    stderr = "".join(errors)
    assert "Current thread" in stderr or "Thread 0x" in stderr, stderr[-2000:]
    assert "allreduce.py" in stderr, stderr[-2000:]  # the dump shows where the rank was


def test_workers_die_with_a_killed_torchrun(rundir, tmp_path):
    """torchrun puts workers in sessions of their own; SIGKILL to torchrun must still not orphan them."""
    spec = write_spec(tmp_path, workload="allreduce", sizes_mb=[1], iterations=100_000, warmup_iterations=0)
    proc = start(torchrun_argv(spec, nproc=2), rundir)
    try:
        pids = _started_pids(proc, count=2, timeout=90)
        os.kill(proc.pid, signal.SIGKILL)  # the agent only, as the OOM killer would
        proc.wait(timeout=30)
        workers = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
        gone, alive = psutil.wait_procs(workers, timeout=20)
        assert not alive, f"workers outlived torchrun: {[p.pid for p in alive]}"
    finally:
        kill_group(proc)


def _started_pids(proc, *, count: int, timeout: float) -> list[int]:
    """Read stdout until ``count`` started lines arrived (bounded); return the ranks' pids in rank order."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    found: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(found) < count:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"fewer than {count} started lines within {timeout} s") from None
        for record in parse_records(line):
            if isinstance(record, Started):
                found[record.rank] = record.pid
    return [found[r] for r in sorted(found)]
