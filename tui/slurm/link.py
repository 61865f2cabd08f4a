"""The Slurm node transport: every command on a node runs as a one-task job step of the allocation.

:class:`SrunLink` offers what :class:`tui.launch.links.NodeLink` offers over SSH — ``exec`` (run, collect),
``stream`` (a long-running command read line by line, whose stdin carries the job files) and ``close`` — as
``srun --jobid=JOB --overlap --nodelist=NODE --nodes=1 --ntasks=1 sh -c COMMAND``. The supervisor and the node
helper (:mod:`agent.nodeside`) are the same as on the SSH backend; only the transport differs. Slurm
accounts for every process started this way, and ``scancel JOB`` ends them all.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any

from shared.config import ClusterConfig, NodeConfig
from tui.launch.links import ExecResult, LinkLost

__all__ = ["SrunLink", "srun_argv", "srun_link_factory"]


def srun_argv(job_id: str, node: str, command: str) -> list[str]:
    """One task of ``command`` (a shell string built from quoted pieces) on ``node`` inside job ``job_id``."""
    return ["srun", f"--jobid={job_id}", "--overlap", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            "--quiet", "--unbuffered", "--kill-on-bad-exit=0", "--job-name=ftwiz-node", "sh", "-c", command]


class _StepLines:
    """Lines from a step's stdout, read by a thread; stdin goes to the task."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._lines: list[bytes] = []
        self._eof = False
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True, name="ftwiz-srun-stream").start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            with self._cond:
                self._lines.append(raw)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def readline(self, timeout: float) -> str | None:
        with self._cond:
            if not self._lines and not self._eof:
                self._cond.wait(timeout)
            if self._lines:
                return self._lines.pop(0).rstrip(b"\n").decode("utf-8", "replace")
            if self._eof:
                raise EOFError
            return None

    def send(self, data: bytes) -> None:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise LinkLost(f"cannot send to the job step: {exc}") from None

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()


class SrunLink:
    """One allocated node, reached through job steps (see the module docstring)."""

    def __init__(self, node: NodeConfig, job_id: str) -> None:
        self.node = node.name
        self.job_id = job_id

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        """Run ``command`` as a step on the node and wait (TimeoutError beyond ``timeout``)."""
        try:
            done = subprocess.run(srun_argv(self.job_id, self.node, command), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout, check=False, start_new_session=True)
        except FileNotFoundError:
            raise LinkLost("srun not found: run ftwiz on a Slurm login node") from None
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.node}: job step did not finish within {timeout:g} s") from None
        stderr = done.stderr.decode("utf-8", "replace")
        if done.returncode != 0 and "srun: error" in stderr and not done.stdout:
            raise LinkLost(f"{self.node}: srun could not start a step in job {self.job_id}: {stderr.strip()[-300:]}")
        return ExecResult(done.returncode, done.stdout.decode("utf-8", "replace"), stderr)

    def stream(self, command: str) -> _StepLines:
        """Start ``command`` as a step whose stdout is read line by line."""
        try:
            proc = subprocess.Popen(srun_argv(self.job_id, self.node, command), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            raise LinkLost("srun not found: run ftwiz on a Slurm login node") from None
        return _StepLines(proc)

    def close(self) -> None:
        """Nothing to release: every step is its own process."""


def srun_link_factory(job_id: str) -> Callable[..., SrunLink]:
    """A ``link_factory`` for :class:`tui.launch.runner.NodeRunner`: nodes of job ``job_id``."""

    def factory(node: NodeConfig, cluster: ClusterConfig, *, timeout: Any = None) -> SrunLink:
        return SrunLink(node, job_id)

    return factory
