"""Real ftwiz agents on loopback for the wizard's tests and snapshots.

Each agent is ``python -m agent`` on its own loopback address (``127.0.0.11`` …) and one port, so
the config — and every picture of the screen — names the same addresses on every run. GPU values
come from the agent's constructed NVML fixtures (``agent/fixtures``); a node without a fixture reports
this machine's real NVML state (no GPU here).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from shared.config import FtwizConfig
from tests.listening import free_port, log_tail, wait_serving
from tests.tui.fixture_cluster import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[2]


AGENT_PORT = free_port()
"""The port every loopback agent of these tests listens on (each on its own address). Chosen per process: the
session fixtures of each pytest-xdist worker, and of any other suite running on this machine, start agents on
the same addresses, so a fixed port would meet another run's agent (HTTP 401: another token)."""
RENDEZVOUS_PORT = free_port()
"""torchrun's rendezvous port in these tests (chosen per process like the agents')."""


@dataclass
class LoopbackAgent:
    """One agent process."""

    name: str
    address: str
    fixture: Optional[str]
    process: Optional[subprocess.Popen] = None
    log_path: Optional[Path] = None

    def stop(self) -> None:
        """Terminate the agent (its node goes down for the wizard)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@dataclass
class LoopbackCluster:
    """Agents on loopback plus the token and config that reach them."""

    workdir: Path
    token_path: Path
    agents: list[LoopbackAgent] = field(default_factory=list)

    def config(self, *, down: Sequence[str] = (), job: Optional[dict] = None, local: Sequence[str] = ()) -> FtwizConfig:
        """A config with every agent's node, plus ``down`` nodes at addresses where nothing listens."""
        nodes = [{"name": a.name, "host": a.address, "workdir": str(self.workdir / a.name), "python": sys.executable,
                  **({"local": True} if a.name in local else {})} for a in self.agents]
        for index, name in enumerate(down):
            nodes.append({"name": name, "host": f"127.0.0.{40 + index}", "workdir": str(self.workdir / name)})
        return FtwizConfig.model_validate({
            "cluster": {"name": "loopback", "agent_port": AGENT_PORT, "agent_token_file": str(self.token_path), "agent_timeout_s": 5.0,
                        "rendezvous_port": RENDEZVOUS_PORT},
            "nodes": nodes,
            "job": job or {},
        })

    def close(self) -> None:
        """Stop every agent."""
        for agent in self.agents:
            agent.stop()


def start_agents(workdir: Path, specs: Sequence[tuple[str, str, Optional[str]]], *, timeout: float = 60.0) -> LoopbackCluster:
    """Start ``(name, address, fixture)`` agents and wait until each answers ``/healthz``."""
    workdir.mkdir(parents=True, exist_ok=True)
    token_path = workdir / "agent.token"
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    cluster = LoopbackCluster(workdir=workdir, token_path=token_path)
    try:
        for name, address, fixture in specs:
            agent = LoopbackAgent(name, address, fixture, log_path=workdir / f"{name}-agent.log")
            (workdir / name).mkdir(exist_ok=True)
            argv = [sys.executable, "-m", "agent", "--host", address, "--port", str(AGENT_PORT), "--token-file", str(token_path),
                    "--node-name", name, "--python", sys.executable, "--disk-path", str(workdir / name), "--log-level", "warning"]
            if fixture:
                argv += ["--gpu-fixture", str(FIXTURES / f"{fixture}.json")]
            log = open(agent.log_path, "wb")
            agent.process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            cluster.agents.append(agent)
        deadline = time.monotonic() + timeout
        for agent in cluster.agents:
            _wait_healthy(agent, deadline)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _wait_healthy(agent: LoopbackAgent, deadline: float) -> None:
    assert agent.process is not None and agent.log_path is not None
    url = f"http://{agent.address}:{AGENT_PORT}/healthz"
    try:
        if wait_serving(agent.process, AGENT_PORT, url, deadline=deadline, log=agent.log_path):
            return
    except RuntimeError as exc:
        raise RuntimeError(f"agent {agent.name} {exc}") from None
    raise RuntimeError(f"agent {agent.name}: another process took {agent.address}:{AGENT_PORT} first: {log_tail(agent.log_path)}")


