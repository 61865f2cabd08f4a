"""The agent as a job step on every allocated node: no installation, a per-job token, an ephemeral port.

``srun --jobid=JOB --overlap --ntasks-per-node=1 --label`` runs ``python -m agent --port 0`` once per node
(its node name is ``$SLURMD_NODENAME``); each task first prints its node name, then uvicorn logs the port
it bound. A reader thread maps srun's task labels to both, so :meth:`AgentStep.wait_ready` knows every
node's port, and keeps draining the step's output (the last lines are kept for error messages).
The token lives in a 0600 file in a 0700 directory under ``[slurm] workdir`` (shared by every node).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

from shared.config import FtwizConfig
from tui.slurm.export import allocation_config

__all__ = ["AgentStep", "AgentStepError", "write_token"]

_LABEL = re.compile(r"^\s*(\d+): (.*)$")
_NODE = re.compile(r"^ftwiz-agent-step node=(\S+)$")
_PORT = re.compile(r"Uvicorn running on https?://\S+:(\d+)")
#: The task's shell: say which node this is, then become the agent with that node name.
_TASK_SH = 'echo "ftwiz-agent-step node=$SLURMD_NODENAME"; exec "$@" --node-name "$SLURMD_NODENAME"'


class AgentStepError(RuntimeError):
    """The agent step did not come up on every node; the message names the nodes and the step's last lines."""


def write_token(directory: Path) -> Path:
    """A fresh token in ``directory/agent.token`` (directory 0700, file 0600); returns the file."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    path = directory / "agent.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    return path


class AgentStep:
    """``srun`` of the agent on every node of an allocation."""

    def __init__(self, config: FtwizConfig, job_id: str, nodes: list[str], addresses: dict[str, str], *,
                 token_file: Path, workdir_abs: str) -> None:
        self.config = config
        self.job_id = job_id
        self.nodes = nodes
        self.addresses = addresses
        self.token_file = token_file
        self.workdir_abs = workdir_abs
        #: Node name -> the port its agent bound.
        self.ports: dict[str, int] = {}
        self._task_node: dict[str, str] = {}
        self._tail: deque[str] = deque(maxlen=60)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def argv(self) -> list[str]:
        """The srun command line (no shell on this side; the task's ``sh -c`` takes the agent argv as ``$@``)."""
        slurm = self.config.slurm
        n = len(self.nodes)
        return [
            "srun", f"--jobid={self.job_id}", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            "--label", "--kill-on-bad-exit=0", "--job-name=ftwiz-agent",
            "sh", "-c", _TASK_SH, "sh",
            slurm.agent_python or slurm.python, "-m", "agent", "--host", "0.0.0.0", "--port", "0",
            "--token-file", str(self.token_file), "--python", slurm.python, "--disk-path", self.workdir_abs,
        ]

    def start(self) -> AgentStep:
        """Start the step (returns at once; :meth:`wait_ready` waits for the ports)."""
        self._proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="ftwiz-slurm-agent-step", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.rstrip("\n")
            with self._lock:
                self._tail.append(line)
                match = _LABEL.match(line)
                if match is None:
                    continue
                task, text = match.groups()
                node_match = _NODE.match(text)
                if node_match:
                    self._task_node[task] = node_match.group(1)
                    continue
                port_match = _PORT.search(text)
                if port_match and task in self._task_node:
                    self.ports[self._task_node[task]] = int(port_match.group(1))

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until every node's agent listens; raise :class:`AgentStepError` naming the missing nodes."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                missing = [n for n in self.nodes if n not in self.ports]
            if not missing:
                return
            if self._proc is not None and self._proc.poll() is not None:
                self._join_reader()
                raise AgentStepError(f"the agent step ended (srun exit {self._proc.returncode}) before the agents on "
                                     f"{', '.join(missing)} listened; its last lines:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AgentStepError(f"no agent port from {', '.join(missing)} within {timeout_s:.0f} s "
                                     f"(is `{self.config.slurm.agent_python or self.config.slurm.python} -m agent` "
                                     f"importable there? set [slurm] agent_python); last lines:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self) -> str:
        """The step's last output lines."""
        with self._lock:
            return "\n".join(self._tail)

    def cluster_config(self) -> FtwizConfig:
        """The config of the allocation: one node per allocated node, its agent port, the per-job token."""
        concrete = allocation_config(self.config, self.nodes, [self.addresses.get(n, n) for n in self.nodes],
                                     agent_ports=self.ports, per_node_workdir=True)
        concrete.cluster.agent_token_file = str(self.token_file)
        return concrete

    def stop(self, grace_s: float = 5.0) -> None:
        """End the step: SIGTERM to srun (it signals the tasks), SIGKILL after ``grace_s``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._join_reader()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace_s)
        self._join_reader()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)
