"""``ftwiz --check`` with ``backend = "slurm"`` on a real Slurm: allocation, agents as a job step, the checklist."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.cluster.node import REPO_ROOT
from tests.cluster.slurm import SlurmCluster
from tests.slurm.helpers import ftwiz, write_config


def _pids_with(text: str) -> list[int]:
    """Pids whose command line holds ``text`` (the agents carry the per-job token path)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_check_runs_against_the_allocation_and_cancels_it(slurm3: SlurmCluster) -> None:
    config = write_config(slurm3, slurm3.shared_dir / "check.toml", rendezvous_port=29512)
    done = ftwiz(slurm3, "--config", str(config), "--check", "--json", timeout=400)
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    rows = {(r["id"], r["node"]): r for r in report["checks"]}
    assert report["ok"] is True
    assert [n["name"] for n in report["cluster"]["nodes"]] == ["node0", "node1", "node2"]
    assert report["cluster"]["master"] == "node0"
    assert [n["state"] for n in report["cluster"]["nodes"]] == ["up", "up", "up"]
    assert rows[("slurm.job", None)]["status"] == "pass"
    assert rows[("slurm.agents", None)]["status"] == "pass"
    assert "3/3 agents up" in rows[("slurm.agents", None)]["detail"]
    assert rows[("ssh.auth", None)]["status"] == "skip" and "not used on Slurm" in rows[("ssh.auth", None)]["detail"]
    assert rows[("env.parity", None)]["status"] == "pass"
    for node in ("node1", "node2"):  # the rendezvous firewall test ran between the allocated nodes
        assert rows[("rendezvous.reachable", node)]["status"] == "pass"
    # The agents ran on the allocated nodes (their own hostnames), and are gone with the job.
    assert "host node2" in rows[("agent.reachable", "node2")]["detail"]
    job = done.stderr.split("submitted job ", 1)[1].split()[0]
    assert slurm3.wait_job_state(job, {"CANCELLED"}, timeout=30) == "CANCELLED"
    token_dir = str(slurm3.shared_dir / "work" / ".ftwiz-slurm" / job)
    deadline = time.monotonic() + 30
    while _pids_with(token_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_with(token_dir) == []


def test_pending_job_says_why_and_ctrl_c_cancels_it(slurm3: SlurmCluster) -> None:
    # 4 nodes: node3 is declared in the partition but never started, so the job can only pend.
    config = write_config(slurm3, slurm3.shared_dir / "pending.toml", nodes=4)
    with _sigint_as_from_a_terminal():
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "--config", str(config), "--check"], cwd=REPO_ROOT,
                                env=slurm3.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    said = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            # which scheduler pass looked at the job last decides the words (tui/slurm/reasons.py)
            if "pending: ReqNodeNotAvail" in line or "pending: Nodes required for job are DOWN" in line:
                said.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert said.wait(60), "".join(lines)
        job = "".join(lines).split("submitted job ", 1)[1].split()[0]
        assert slurm3.job_state(job) == "PENDING"
        proc.send_signal(signal.SIGINT)
        assert _exit_code(proc, 120, lines) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    text = "".join(lines)
    assert "some nodes the job needs are down, drained or reserved" in text and "sinfo -R" in text
    assert f"job {job} cancelled" in text
    assert slurm3.job_state(job) == "CANCELLED"


@contextlib.contextmanager
def _sigint_as_from_a_terminal() -> Iterator[None]:
    """Start a child that Ctrl-C reaches, whatever SIGINT this test process inherited.

    A background job of a non-interactive shell (``cmd &`` in a script) starts with SIGINT ignored; everything it
    starts inherits that, and Python then installs no KeyboardInterrupt handler. A suite started that way saw ftwiz
    ignore the test's SIGINT and go on waiting for the job. A Python handler here, unlike SIG_IGN, becomes the
    default again in the child at exec, as in a foreground process of a terminal.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _exit_code(proc: subprocess.Popen, timeout: float, lines: list[str]) -> int:
    """``proc``'s exit code; if it is still running after ``timeout`` s, fail with what it said, its Python stack
    (py-spy, installed with the training extra) and its children (that stack is how an inherited, ignored SIGINT
    was found: see :func:`_sigint_as_from_a_terminal`)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        spy = subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(proc.pid)],
                             capture_output=True, text=True, timeout=60, check=False)
        children = subprocess.run(["ps", "-o", "pid,stat,wchan:20,etime,args", "--ppid", str(proc.pid)],
                                  capture_output=True, text=True, timeout=10, check=False)
        raise AssertionError(f"ftwiz still runs {timeout:g} s after Ctrl-C. It said:\n{''.join(lines)}\n"
                             f"py-spy dump:\n{spy.stdout}{spy.stderr}\nits children:\n{children.stdout}") from None
