"""Start an agent on this machine for the embedded default (or any ``local = true`` node).

With no ``ftwiz.toml`` anywhere, this machine is a one-node cluster, and ``ftwiz`` must work without
the user starting anything. :class:`LocalAgent` checks whether an agent already answers on
``127.0.0.1:agent_port``; if not, it makes sure a token exists (mode 0600, under ``~/.config/ftwiz``),
starts ``python -m agent`` bound to 127.0.0.1 only, waits for ``/healthz``, and on exit stops the agent
*only if it started it*. The agent's output goes to ``~/.cache/ftwiz/local-agent.log``.

Usage::

    with LocalAgent(config) as local:   # no-op when no node is local
        ...                              # local.started says whether we started it
"""

from __future__ import annotations

import http.client
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from shared.config import FtwizConfig, NodeConfig

__all__ = ["LocalAgent", "LocalAgentError", "ensure_token"]


class LocalAgentError(RuntimeError):
    """The local agent could not be started; the message says why and where its log is."""


def ensure_token(path: str) -> Path:
    """Create the token file (random, mode 0600, parent 0700) when missing; return its path."""
    token_path = Path(os.path.expanduser(path))
    if token_path.is_file() and token_path.read_text(encoding="utf-8").strip():
        return token_path
    token_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # O_EXCL-free but created 0600 from the start, so the secret is never readable by others.
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(token_path, 0o600)
    return token_path


def _log_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ftwiz"


class LocalAgent:
    """Context manager that makes sure the local node's agent answers, starting one if needed.

    ``node`` defaults to the first ``local = true`` node; with none, entering is a no-op. ``python`` is
    the interpreter that runs the agent (this one by default); the node's ``python`` is passed as the
    training interpreter to probe.
    """

    def __init__(
        self,
        config: FtwizConfig,
        node: Optional[NodeConfig] = None,
        *,
        python: str = sys.executable,
        startup_timeout_s: float = 20.0,
        log_path: Optional[Path] = None,
        extra_args: Optional[list[str]] = None,
    ) -> None:
        self.config = config
        self.node = node or next((n for n in config.nodes if n.local), None)
        self.python = python
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or _log_dir() / "local-agent.log"
        self.extra_args = extra_args or []
        self.process: Optional[subprocess.Popen] = None
        self.started = False
        """True when this object started the agent (and will stop it)."""
        self._spawned_at = 0.0

    @property
    def port(self) -> int:
        """The local agent's port."""
        assert self.node is not None
        return self.config.agent_port(self.node)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        # The standard library's client: plain HTTP to 127.0.0.1 needs no proxy logic and no TLS context (httpx builds
        # one per call, ~20 ms of CPU each, and the start-up waits poll every 50 ms), and no import of httpx here.
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def __enter__(self) -> "LocalAgent":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the agent unless one answers already; raise :class:`LocalAgentError` when it will not come up."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the agent's process unless one answers already, without waiting for it (the caller overlaps its
        own start-up with the agent's, then calls :meth:`wait_ready`)."""
        if self.node is None or self.process is not None or self._answers():
            return
        token = ensure_token(self.config.cluster.agent_token_file)
        workdir = Path(os.path.expanduser(self.node.workdir))
        workdir.mkdir(parents=True, exist_ok=True)
        output_dir = workdir / os.path.expanduser(self.config.job.output_dir)
        argv = [
            self.python, "-m", "agent",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--token-file", str(token),
            "--node-name", self.node.name,
            "--python", self.node.python,
            "--disk-path", str(workdir),
            "--disk-path", str(output_dir),
            *self.extra_args,
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            # Run from the project root so `-m agent` resolves even without an installed package.
            root = Path(__file__).resolve().parent.parent
            env = dict(os.environ)
            env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            raise LocalAgentError(f"cannot start the local agent ({argv[0]}): {exc.strerror or exc}") from None
        finally:
            log.close()
        self.started = True
        self._spawned_at = time.monotonic()

    def wait_ready(self) -> None:
        """Wait until the agent :meth:`spawn` started answers ``/healthz`` (no-op when none was started)."""
        if self.process is None or not self.started:
            return
        deadline = self._spawned_at + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.started = False
                raise LocalAgentError(
                    f"the local agent exited with status {self.process.returncode} before answering; "
                    f"see {self.log_path}:\n{_tail(self.log_path)}"
                )
            if self._answers():
                return
            time.sleep(0.05)
        self.stop()
        raise LocalAgentError(f"the local agent did not answer on {self.url} within {self.startup_timeout_s:g} s; see {self.log_path}")

    def stop(self) -> None:
        """Stop the agent if this object started it (SIGTERM, then SIGKILL after 5 s)."""
        if not self.started or self.process is None:
            return
        self.started = False
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
