"""``ftwiz`` as a user runs it: a subprocess, its exit code, stdout and stderr."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.fixtures import in_ci
from tests.cluster.harness import REPO_ROOT

STATUSES = {"pass", "warn", "fail", "skip"}


def ftwiz(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 180,
          wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``python -m tui.cli ARGS`` (``wrap`` runs it under another command, e.g. in its own network namespace)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p)
    return subprocess.run([*wrap, sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO_ROOT, env=full_env, stdin=subprocess.DEVNULL)


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom tui.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('torch', 'textual', 'paramiko', 'httpx', 'pydantic', 'rich') if m in sys.modules]\n"
            "print('HEAVY=' + ','.join(heavy))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "HEAVY=\n" in res.stdout and "--check" in res.stdout and "exit codes" in res.stdout


_EXIT = """
import atexit, sys, threading, time
from tui.cli import exit_now
atexit.register(lambda: print("atexit ran", flush=True))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("the thread finished"))).start()
print("buffered, not flushed", end="")
sys.stderr.write("on stderr")
exit_now(3)
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
def test_exit_now_keeps_the_exit_code_the_output_atexit_and_a_running_thread(thread):
    """ftwiz leaves without the interpreter's finalisation, but loses nothing a normal exit would keep."""
    res = subprocess.run([sys.executable, "-c", _EXIT, thread], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert res.returncode == 3, res.stderr
    assert res.stdout.startswith("buffered, not flushed") and "atexit ran" in res.stdout and res.stderr == "on stderr"
    if thread == "thread":
        assert "the thread finished" in res.stdout  # the normal exit, which waits for it


@pytest.mark.parametrize("args", [["--json"], ["--check", "--launch"], ["--yes", "--check"], ["--bogus"], ["--stop"], ["--mesh"]])
def test_usage_errors_exit_2(args):
    res = ftwiz(*args)
    assert res.returncode == 2 and "usage: ftwiz" in res.stderr


def test_config_errors_exit_2_with_file_line_and_field(tmp_path):
    bad = tmp_path / "ftwiz.toml"
    bad.write_text('[[nodes]]\nname = "n0"\nhost = "10.0.0.1"\n[job]\nmethod = "qlora2"\n')
    res = ftwiz("--config", str(bad), "--check")
    assert res.returncode == 2 and res.stdout == ""
    assert f"{bad}:5: job.method: must be one of 'full', 'lora' or 'qlora' (got 'qlora2')" in res.stderr
    assert "Traceback" not in res.stderr
    res = ftwiz("--config", str(tmp_path / "missing.toml"), "--check")
    assert res.returncode == 2 and "missing.toml: config file not found" in res.stderr
    # ./ftwiz.toml is picked up when no --config is given
    res = ftwiz("--check", cwd=tmp_path)
    assert res.returncode == 2 and f"{bad}:5" in res.stderr


def _assert_schema(doc: dict) -> None:
    assert set(doc) >= {"ok", "cluster", "checks"} and isinstance(doc["ok"], bool)
    assert set(doc["cluster"]) >= {"name", "master", "nodes"}
    for node in doc["cluster"]["nodes"]:
        assert set(node) >= {"name", "host", "state"}
    assert doc["checks"]
    for check in doc["checks"]:
        assert set(check) == {"id", "title", "status", "node", "detail", "hint"}
        assert check["status"] in STATUSES and isinstance(check["detail"], str) and isinstance(check["hint"], str)
    assert doc["ok"] == (not any(c["status"] == "fail" for c in doc["checks"]))


def test_json_and_exit_codes_against_the_cluster(fresh3, tmp_path):
    path = fresh3.write_config(tmp_path / "ftwiz.toml", workload="allreduce")
    res = ftwiz("--config", str(path), "--check", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    _assert_schema(doc)
    assert doc["ok"] is True and [n["state"] for n in doc["cluster"]["nodes"]] == ["up"] * 3
    assert "checklist done" in res.stderr and "agents: 3/3 up" in res.stderr  # progress goes to stderr
    fresh3.node("node0").nft_block_port(29500)
    res = ftwiz("--config", str(path), "--check", "--json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    _assert_schema(doc)
    assert doc["ok"] is False
    assert {(c["id"], c["node"]) for c in doc["checks"] if c["status"] == "fail"} == {
        ("rendezvous.reachable", "node1"), ("rendezvous.reachable", "node2")}
    # plain lines when stdout is not a terminal
    res = ftwiz("--config", str(path), "--check")
    assert res.returncode == 1
    assert any(line.startswith("FAIL  rendezvous.reachable  node1  ") for line in res.stdout.splitlines())
    assert "      fix: open TCP 29500 on node0" in res.stdout


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# As root, ftwiz runs in a network namespace of its own (only lo): the embedded default's fixed agent port 8462
# and rendezvous port 29500 are free there whatever else runs on this machine, and the script checks 8462 is
# free again inside it once ftwiz exited. Otherwise the machine's own 127.0.0.1 is used when 8462 is free.
_OWN_NETWORK = r"""
ip link set lo up || exit 97
"$@"; rc=$?
"$1" -c 'import socket; socket.socket().bind(("127.0.0.1", 8462))' 2>/dev/null || echo "ftwiz-test: 8462 still taken after exit" >&2
exit $rc
"""


def test_embedded_default_starts_and_stops_a_local_agent(tmp_path):
    isolated = os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None
    if not isolated and not _port_free(8462):
        message = "127.0.0.1:8462 is taken by another agent; the embedded default needs it (as root the test takes its own network)"
        if in_ci():
            pytest.fail(f"CI=true: {message}", pytrace=False)
        pytest.skip(message)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    wrap = ("unshare", "--net", "sh", "-c", _OWN_NETWORK, "sh") if isolated else ()
    res = ftwiz("--check", "--json", cwd=work, env={"HOME": str(home), "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""}, wrap=wrap)
    doc = json.loads(res.stdout)
    _assert_schema(doc)
    failed = {c["id"] for c in doc["checks"] if c["status"] == "fail"}
    if isolated:
        assert not failed, res.stdout
    else:  # other work on this machine may hold the default rendezvous port 29500: then that row alone fails
        assert failed <= {"rendezvous.port_free"}, res.stdout
    assert res.returncode == (1 if failed else 0), res.stderr
    assert doc["cluster"]["config"] is None and len(doc["cluster"]["nodes"]) == 1
    assert doc["cluster"]["nodes"][0]["state"] == "up"
    assert "started a local agent on http://127.0.0.1:8462" in res.stderr
    token = home / ".config" / "ftwiz" / "agent.token"
    assert token.is_file() and (token.stat().st_mode & 0o777) == 0o600
    if isolated:
        assert "8462 still taken after exit" not in res.stderr, "the local agent we started must be stopped on exit"
    else:
        assert _port_free(8462), "the local agent we started must be stopped on exit"
    gpu = [c for c in doc["checks"] if c["id"] == "gpu.present"]
    assert gpu and gpu[0]["status"] in ("warn", "pass")
