"""The ``ftwiz-agent`` command line: token files, refusals, and never importing torch."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, AgentProcess, free_port


def agent_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def test_token_creates_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "nested" / "agent.token"
    result = agent_cli("token", str(path))
    assert result.returncode == 0, result.stderr
    token = path.read_text().strip()
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "nested").stat().st_mode) == 0o700
    assert token not in result.stdout + result.stderr, "the token is never printed"
    assert str(path) in result.stdout


def test_token_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "agent.token"
    assert agent_cli("token", str(path)).returncode == 0
    first = path.read_text()
    refused = agent_cli("token", str(path))
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert path.read_text() == first
    assert agent_cli("token", "--force", str(path)).returncode == 0
    assert path.read_text() != first and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_token_respects_no_umask_surprises(tmp_path: Path) -> None:
    path = tmp_path / "agent.token"
    result = subprocess.run(
        ["bash", "-c", 'umask 000 && exec "$0" -m agent token "$1"', sys.executable, str(path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_serve_refuses_a_readable_token_file(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "my token"  # a space: the fix must be quoted to be copy-pasteable
    assert agent_cli("token", str(path)).returncode == 0
    os.chmod(path, mode)
    result = agent_cli("--token-file", str(path), "--port", str(free_port()), timeout=30)
    assert result.returncode == 2
    assert f"chmod 600 '{path}'" in result.stderr
    assert f"{mode:04o}" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_explains_a_missing_token_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.token"
    result = agent_cli("serve", "--token-file", str(path), "--port", str(free_port()), timeout=30)
    assert result.returncode == 2
    assert f"ftwiz-agent token {path}" in result.stderr and "Traceback" not in result.stderr


def test_serve_refuses_an_empty_token(tmp_path: Path) -> None:
    path = tmp_path / "empty.token"
    path.write_text("short\n")
    os.chmod(path, 0o600)
    result = agent_cli("--token-file", str(path), "--port", str(free_port()), timeout=30)
    assert result.returncode == 2 and "ftwiz-agent token --force" in result.stderr


def test_serve_explains_a_bad_gpu_fixture(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    assert agent_cli("token", str(token)).returncode == 0
    bad = tmp_path / "fixture.json"
    bad.write_text('{"kind": "ftwiz-nvml-fixture", "devices": []}')
    result = agent_cli("--token-file", str(token), "--port", str(free_port()), "--gpu-fixture", str(bad), timeout=30)
    assert result.returncode == 2 and '"source"' in result.stderr and "Traceback" not in result.stderr


def test_serve_explains_a_port_another_program_holds(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    assert agent_cli("token", str(token)).returncode == 0
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        result = agent_cli("--token-file", str(token), "--host", "127.0.0.1", "--port", str(port), timeout=30)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in result.stderr
    assert "another --port" in result.stderr and f"sport = :{port}" in result.stderr


def test_serve_explains_a_host_that_is_not_this_machines(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    assert agent_cli("token", str(token)).returncode == 0
    result = agent_cli("--token-file", str(token), "--host", "192.0.2.1", "--port", str(free_port()), timeout=30)  # TEST-NET-1
    assert result.returncode == 2 and "--host 192.0.2.1 is not an address of this machine" in result.stderr


@pytest.mark.parametrize("args", [["--interval", "0"], ["--port", "70000"], ["--probe-allow", "not-a-net"], ["--log-level", "loud"]])
def test_bad_options_are_usage_errors(args: list[str]) -> None:
    result = agent_cli(*args, timeout=30)
    assert result.returncode == 2 and "usage: ftwiz-agent" in result.stderr and "Traceback" not in result.stderr


def test_help_lists_the_interface() -> None:
    result = agent_cli("--help", timeout=30)
    assert result.returncode == 0
    for option in ("--host", "--port", "--token-file", "--node-name", "--python", "--disk-path", "--interval", "--log-level", "--gpu-fixture"):
        assert option in result.stdout
    assert "ftwiz-agent token PATH" in result.stdout
    assert "8462" in result.stdout


def test_the_daemon_never_imports_torch() -> None:
    """Importing every agent module and building the app leaves torch (and transformers) unloaded."""
    code = (
        "import sys, pkgutil, importlib, agent\n"
        "names = [m.name for m in pkgutil.walk_packages(agent.__path__, 'agent.') if not m.name.startswith('agent.workloads') and m.name != 'agent.__main__']\n"
        "for name in names: importlib.import_module(name)\n"
        "from agent.main import create_app\n"
        "from agent.settings import AgentSettings\n"
        "create_app(AgentSettings(node_name='n', token='t' * 20)).openapi()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'peft', 'bitsandbytes', 'accelerate', 'numpy') if m in sys.modules)\n"
        "print(len(names), heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    count, heavy = result.stdout.split(" ", 1)
    assert int(count) >= 15 and heavy.strip() == "[]"


def test_python_m_agent_help_does_not_import_torch() -> None:
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "agent.cli" in imported


@pytest.mark.parametrize("connection_open", [False, True])
def test_sigterm_runs_the_lifespan_shutdown_with_or_without_an_open_connection(tmp_path: Path, connection_open: bool) -> None:
    """With no connection open the agent skips uvicorn's grace for open connections; either way it closes its
    listening socket, runs the application's shutdown (sampler, test listeners) and exits 0."""
    agent = AgentProcess(tmp_path, node_name="stopping", extra_args=["--log-level", "info"])
    with agent.client() as http:
        assert http.get("/v1/report").status_code == 200
        if not connection_open:
            http.close()
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(30) == -signal.SIGTERM, agent.log_tail()  # uvicorn re-raises the signal once it is done
    agent.stop()
    log = agent.log_path.read_text()
    assert "Shutting down" in log and "Application shutdown complete" in log, log[-2000:]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the next agent would: TIME_WAIT is no listener
        sock.bind(("127.0.0.1", agent.port))
        sock.listen()  # nothing listens there any more
