"""Real ``ftwiz-agent`` processes on 127.0.0.1 for the agent tests.

Every agent is ``python -m agent`` in a subprocess with its own token file and a free port;
tests talk to it with httpx over real HTTP. Only loopback addresses are ever contacted.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import httpx
import pytest

from agent.fixtures import H100_SXM_8X
from tests.listening import free_port, log_tail, wait_serving

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3


def make_token(directory: Path, name: str = "agent.token") -> Path:
    """A token file created by the real ``ftwiz-agent token`` command."""
    path = directory / name
    subprocess.run([sys.executable, "-m", "agent", "token", str(path)], cwd=REPO_ROOT, check=True, capture_output=True, timeout=30)
    return path


class AgentProcess:
    """One running agent: its URL, token, log and process."""

    def __init__(self, workdir: Path, *, node_name: str, token_file: Optional[Path] = None, extra_args: Sequence[str] = (),
                 tls: Optional[tuple[Path, Path]] = None) -> None:
        self.workdir = workdir
        self.node_name = node_name
        #: ``(certificate, key)``: the agent serves HTTPS only (``--tls-cert``/``--tls-key``).
        self.tls = tls
        if tls is not None:
            extra_args = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1]), *extra_args]
        self.token_file = token_file or make_token(workdir, f"{node_name}.token")
        self.token = self.token_file.read_text().strip()
        self.log_path = workdir / f"{node_name}.log"
        for _ in range(PORT_ATTEMPTS):  # a port another test took between the kernel's choice and the bind: another one
            self.port = free_port()
            self.url = f"{'https' if tls else 'http'}://{LOOPBACK}:{self.port}"
            argv = [
                sys.executable, "-m", "agent", "serve",
                "--host", LOOPBACK, "--port", str(self.port),
                "--token-file", str(self.token_file),
                "--node-name", node_name,
                "--disk-path", str(workdir),
                "--disk-path", str(workdir / "not-created-yet"),
                "--log-level", "warning",
                *extra_args,
            ]
            self._log = open(self.log_path, "wb")
            self.process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_healthy():
                return
            self._log.close()
        raise RuntimeError(f"agent {node_name}: {PORT_ATTEMPTS} free ports in a row were taken before it bound them:\n{self.log_tail()}")

    @property
    def auth(self) -> dict[str, str]:
        """Headers carrying this agent's token."""
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs) -> httpx.Client:
        """An authenticated client for this agent (never uses proxies from the environment)."""
        if self.tls is not None:
            kwargs.setdefault("verify", ssl.create_default_context(cafile=str(self.tls[0])))
        return httpx.Client(base_url=self.url, headers=self.auth, timeout=30.0, trust_env=False, **kwargs)

    def log_tail(self) -> str:
        """The last lines the agent logged."""
        return log_tail(self.log_path)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()

    def _wait_healthy(self) -> bool:
        """Until this agent process listens on its port and answers ``/healthz``: True; False when another process took
        the port first (this one exits, unable to bind); any other exit or no answer in time raises."""
        verify = ssl.create_default_context(cafile=str(self.tls[0])) if self.tls is not None else True
        try:
            return wait_serving(self.process, self.port, self.url + "/healthz", deadline=time.monotonic() + START_TIMEOUT_S,
                                log=self.log_path, verify=verify)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"agent {self.node_name} {exc}") from None


def wait_for(predicate, *, timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture(scope="session")
def agent_dir(tmp_path_factory) -> Path:
    """A private folder for the agents of this test session (token files, logs)."""
    directory = tmp_path_factory.mktemp("agent")
    os.chmod(directory, 0o700)
    return directory


@pytest.fixture(scope="session")
def agent(agent_dir: Path) -> Iterator[AgentProcess]:
    """A GPU-less agent on this machine (live NVML, which finds no driver here)."""
    process = AgentProcess(agent_dir, node_name="plain", extra_args=["--stop-grace", "1"])
    yield process
    process.stop()


@pytest.fixture(scope="session")
def gpu_agent(agent_dir: Path) -> Iterator[AgentProcess]:
    """An agent serving the constructed 8x H100 fixture (its own token)."""
    process = AgentProcess(agent_dir, node_name="h100", extra_args=["--gpu-fixture", str(H100_SXM_8X)])
    yield process
    process.stop()


@pytest.fixture(scope="session")
def client(agent: AgentProcess) -> Iterator[httpx.Client]:
    """Authenticated client of ``agent``."""
    with agent.client() as http:
        yield http
