"""Which process answers on a loopback port: the tests' agents take a free port from the kernel, then bind it.

Between the two another test's listener (the other xdist worker) can take the port; the agent then fails to bind
(``address already in use``) while ``/healthz`` on the port answers 200 from the other process, and the test talks
to a stranger with a different token (a CI dry run failed two probe tests that way). A start is proven by the
process itself holding the listening socket, never by an answer on the port.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

__all__ = ["PORT_TAKEN", "free_port", "listens", "log_tail", "wait_serving"]

PORT_TAKEN = "address already in use"
"""What uvicorn logs when the port it was given was taken first (then the agent exits)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's choice; a claim until something binds it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listens(process: subprocess.Popen, port: int) -> bool:
    """Whether ``process`` itself holds a listening TCP socket on ``port``."""
    try:
        connections = psutil.Process(process.pid).net_connections(kind="tcp")
    except psutil.Error:  # it exited, or is exiting
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def wait_serving(process: subprocess.Popen, port: int, url: str, *, deadline: float, log: Path, verify: Any = True) -> bool:
    """Until ``process`` itself listens on ``port`` and ``url`` (its ``/healthz``) answers 200: True.

    False when the process exited because another process took the port first (:data:`PORT_TAKEN` in its ``log``):
    the caller may take another port. Any other exit, or no answer by ``deadline`` (a ``time.monotonic()``), raises
    RuntimeError with the end of the log.
    """
    while time.monotonic() < deadline:
        if process.poll() is not None:
            if PORT_TAKEN in log_tail(log):
                return False
            raise RuntimeError(f"exited with {process.returncode}:\n{log_tail(log)}")
        if listens(process, port):
            try:
                if httpx.get(url, timeout=1.0, trust_env=False, verify=verify).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"did not answer {url} in time:\n{log_tail(log)}")


def log_tail(log: Path | None) -> str:
    """The last 3000 characters of a process's log ("" when there is none yet)."""
    if log is None:
        return ""
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return ""
