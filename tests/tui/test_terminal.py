"""``ftwiz`` in a real terminal (tmux) against the multi-host harness cluster.

Three network-namespace nodes with real sshd and agents (node0 serves the H100 fixture, node1 the
RTX 4090 fixture, node2 has no GPU). The test types what a user would: it waits for the node rows,
looks at the Job step, runs the checklist, launches the all-reduce check and sees it finish, then
quits. Every screen's text (``tmux capture-pane -p``) is written to ``tests/tui/captures/`` — the
screenshot-equivalents quoted in the closing note; each run regenerates them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.config import to_toml
from tests.cluster.fixtures import in_ci

CAPTURES = Path(__file__).resolve().parent / "captures"
FIXTURES = Path(__file__).resolve().parents[2] / "agent" / "fixtures"
WIDTH, HEIGHT = 120, 40

pytestmark = pytest.mark.slow


class Tmux:
    """One tmux server of our own (``-L``), so nothing touches the user's sessions."""

    def __init__(self, name: str) -> None:
        self.socket = name
        self.session = name

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``tmux -L <socket> args...``."""
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30, check=check)

    def start(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        """A detached WIDTH×HEIGHT session running ``command`` in ``cwd``."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # COLUMNS/LINES inherited from the test process would override the pane's real size.
        self.run("new-session", "-d", "-s", self.session, "-x", str(WIDTH), "-y", str(HEIGHT), "-c", str(cwd),
                 f"env -u COLUMNS -u LINES {exports} {command}")
        self.run("set-option", "-t", self.session, "remain-on-exit", "on")
        self.run("resize-window", "-t", self.session, "-x", str(WIDTH), "-y", str(HEIGHT), check=False)

    def size(self) -> str:
        """``WIDTHxHEIGHT`` of the window."""
        return self.run("display-message", "-p", "-t", self.session, "#{window_width}x#{window_height}").stdout.strip()

    def keys(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names: F4, Escape, C-q, or plain text)."""
        for key in keys:
            self.run("send-keys", "-t", self.session, key)
            time.sleep(0.15)

    def screen(self) -> str:
        """What the terminal shows now."""
        return self.run("capture-pane", "-p", "-t", self.session).stdout

    def wait_for(self, needle: str, *, timeout: float = 60.0, gone: bool = False) -> str:
        """Wait until ``needle`` is on screen (or, with ``gone``, off it); return the screen."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if (needle in text) != gone:
                return text
            time.sleep(0.3)
        raise AssertionError(f"{'still' if gone else 'never'} saw {needle!r} within {timeout:g} s; the terminal shows:\n{text}")

    def dead(self) -> bool:
        """The pane's program has exited."""
        result = self.run("display-message", "-p", "-t", self.session, "#{pane_dead}", check=False)
        return result.stdout.strip() == "1"

    def kill(self) -> None:
        """End the server (and with it anything still running in it)."""
        self.run("kill-server", check=False)


def _need_tmux() -> None:
    """Skip without tmux; in CI (``CI=true``) fail instead, since `make test` installs it."""
    if shutil.which("tmux") is None:
        if in_ci():
            pytest.fail("CI=true but tmux is missing: `make sysdeps` (run by `make test` as root) installs it", pytrace=False)
        pytest.skip("tmux not installed (apt-get install tmux, or `make sysdeps`)")


def _save(name: str, text: str) -> None:
    CAPTURES.mkdir(exist_ok=True)
    (CAPTURES / f"{name}.txt").write_text(text.rstrip() + "\n")


def _ftwiz() -> str:
    script = Path(sys.executable).with_name("ftwiz")
    if script.exists():
        return str(script)
    return f"{shlex.quote(sys.executable)} -m tui.cli"


def test_wizard_in_tmux_checks_and_launches_allreduce(make_cluster, tmp_path):
    _need_tmux()
    cluster = make_cluster(3, gpu_fixture=[str(FIXTURES / "h100-sxm-8x.json"), str(FIXTURES / "rtx4090-1x.json"), None])
    config = cluster.config(workload="allreduce", sizes_mb=[1, 4], iterations=10, warmup_iterations=2)
    config.nodes[0].gpus = 2  # two of node0's eight (fixture) GPUs: 2+1+1 ranks on this 2-core machine
    path = tmp_path / "ftwiz.toml"
    path.write_text("# written by tests/tui/test_terminal.py for the namespace cluster\n" + to_toml(config))
    tmux = Tmux(f"ftwiz-tui-{os.getpid()}")
    env = {"TERM": "xterm-256color", "FTWIZ_RUNS_DIR": str(tmp_path / "runs"), "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "COLORTERM": "truecolor", "LANG": "C.UTF-8"}
    status_file = tmp_path / "exit-status"
    tmux.start(f"sh -c {shlex.quote(f'{_ftwiz()} --config {shlex.quote(str(path))}; echo $? > {shlex.quote(str(status_file))}')}", tmp_path, env)
    try:
        assert tmux.size() == f"{WIDTH}x{HEIGHT}"
        screen = tmux.wait_for("8× H100", timeout=60)
        screen = tmux.wait_for("1× RTX 4090")
        screen = tmux.wait_for("no GPU (")
        assert screen.count("● up") == 3, screen
        time.sleep(3)  # a few seconds of utilisation history in the sparklines
        _save("1-cluster", tmux.screen())

        tmux.keys("F3")
        tmux.wait_for("Memory per GPU")
        screen = tmux.wait_for("all-reduce check needs no plan")
        _save("2-job", screen)

        tmux.keys("F4")
        tmux.wait_for("Not run yet")
        tmux.keys("r")
        screen = tmux.wait_for("Running checks", timeout=20)
        _save("3-checklist-running", screen)
        screen = tmux.wait_for("ready to launch (l)", timeout=180)
        assert "✖ fail" not in screen
        _save("3-checklist", screen)

        tmux.keys("l")
        tmux.wait_for("not started · all-reduce check")
        tmux.keys("l")
        screen = tmux.wait_for("node0:running", timeout=120)
        _save("4-launch-running", screen)
        screen = tmux.wait_for(": succeeded", timeout=240)
        assert "all-reduce: 2/2 sizes measured" in screen and "busbw" in screen
        _save("4-launch", screen)

        tmux.keys("F1")
        _save("5-help", tmux.wait_for("Go to the Cluster step"))
        tmux.keys("Escape")
        tmux.wait_for("Go to the Cluster step", gone=True)

        tmux.keys("C-q")
        deadline = time.monotonic() + 30
        while not tmux.dead() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert tmux.dead(), tmux.screen()
        assert status_file.read_text().strip() == "0"
        assert path.read_text().startswith("# written by tests/tui/test_terminal.py")  # nothing changed, nothing saved
    finally:
        tmux.kill()


def test_wizard_in_tmux_job_step_fits_a_qlora_job(make_cluster, tmp_path):
    """The Job step of a QLoRA fine-tune in a real terminal: per-GPU bars, verdicts and routing advice."""
    _need_tmux()
    cluster = make_cluster(2, gpu_fixture=[str(FIXTURES / "h100-sxm-8x.json"), str(FIXTURES / "rtx4090-1x.json")])
    config = cluster.config(workload="sft", model="meta-llama/Llama-2-7b-hf", dataset="data/train.jsonl", method="qlora",
                            seq_len=2048, micro_batch_size=1)
    config.nodes[0].gpus = 2
    path = tmp_path / "ftwiz.toml"
    path.write_text("# written by tests/tui/test_terminal.py for the namespace cluster\n" + to_toml(config))
    tmux = Tmux(f"ftwiz-tui-job-{os.getpid()}")
    env = {"TERM": "xterm-256color", "FTWIZ_RUNS_DIR": str(tmp_path / "runs"), "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "COLORTERM": "truecolor", "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
    tmux.start(f"{_ftwiz()} --config {shlex.quote(str(path))}", tmp_path, env)
    try:
        tmux.wait_for("8× H100", timeout=60)
        tmux.wait_for("1× RTX 4090")
        tmux.keys("F3")
        tmux.wait_for("Per-GPU peak ≈", timeout=60)
        screen = tmux.wait_for("node1 GPU0", timeout=30)  # a bar per selected GPU once the reports are in
        # node0's two H100s (one row: same GPU, same verdict) and node1's RTX 4090 both hold a 7B QLoRA job
        assert "node0 GPU0-1" in screen and screen.count("fits") >= 2, screen
        assert "won't fit" not in screen, screen
        _save("2-job-sft", screen)
        tmux.keys("C-q")
        deadline = time.monotonic() + 30
        while not tmux.dead() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert tmux.dead(), tmux.screen()
    finally:
        tmux.kill()
