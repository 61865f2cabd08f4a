"""A newcomer's own script on this machine (issue 19): one local node, two CPU ranks, a plain loop's progress.

The script is written here as nanoGPT's training loop prints (``iter N: loss X, time Yms``), under gloo, with
no ftwiz import. ``ftwiz --launch --yes`` runs it as a user types it (its own local agent, no ``--force``); the
wizard runs the same config through its Launch step (Pilot). A mistyped script is caught by the checklist
and, forced past it, named on the console by the node side.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.listening import free_port

pytestmark = pytest.mark.slow  # real torchrun runs

TRAIN = '''\
import os, time
import torch
import torch.distributed as dist

backend = "gloo"
dist.init_process_group(backend=backend)
rank, world = dist.get_rank(), dist.get_world_size()
print(f"world size {world}", flush=True)
w = torch.zeros(4)
for it in range(1, 31):
    t0 = time.time()
    g = torch.ones(4) * (rank + 1)
    dist.all_reduce(g)
    w -= 0.01 * g
    loss = float(2.0 / it)
    if rank == 0:
        print(f"iter {it}: loss {loss:.4f}, time {(time.time() - t0) * 1000:.2f}ms", flush=True)
    time.sleep(0.15)
dist.destroy_process_group()
'''
REGEX = r"iter (?P<step>\d+): loss (?P<loss>[0-9.]+)"


def _project(tmp_path: Path, script: str = "train.py", *, total: int = 30) -> Path:
    """The user's directory: train.py and the ftwiz.toml the README's "Your own script on this machine" shows."""
    code = tmp_path / "proj"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    token = tmp_path / "agent.token"
    config = code / "ftwiz.toml"
    config.write_text(f'''\
[cluster]
agent_port = {free_port()}
rendezvous_port = {free_port()}
agent_token_file = "{token}"
agent_timeout_s = 20   # a freshly started agent on a loaded 2-core machine answers late; the README's config keeps 3 s

[[nodes]]
name = "here"
host = "127.0.0.1"
local = true
python = "{sys.executable}"
workdir = "{tmp_path / 'work'}"
cpu_ranks = 2

[job]
workload = "command"
command = ["{script}"]
progress_regex = '{REGEX}'
progress_total = {total}
''')
    return config


def _ftwiz(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(config.parent.parent / "cache")}
    return subprocess.run([sys.executable, "-m", "tui.cli", "--config", str(config), *args], cwd=config.parent, env=env,
                          capture_output=True, text=True, timeout=400)


def test_a_plain_loop_on_two_cpu_ranks_shows_progress_with_an_eta(tmp_path):
    config = _project(tmp_path)
    done = _ftwiz(config, "--launch", "--yes")
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, f"{err[-3000:]}\n{out[-3000:]}"
    assert "checklist passed" in err and "--force" not in err
    assert "here/0 | started: rank 0 of 2" in out and "here/1 | started: rank 1 of 2" in out
    assert "world size 2" in out
    progress = [line for line in out.splitlines() if line.startswith("progress | step ")]
    assert progress and "progress | step 30/30" in progress[-1], progress[-3:]
    assert any(re.search(r"step \d+/30  loss [0-9.]+  ETA \d+:\d\d", line) for line in progress), progress


def test_a_mistyped_script_is_named_by_the_checklist_and_by_the_node(tmp_path):
    config = _project(tmp_path, "trian.py")
    refused = _ftwiz(config, "--launch", "--yes")
    assert refused.returncode != 0
    shown = refused.stdout + refused.stderr
    assert "trian.py is not in the shipped code" in shown and "did you mean train.py?" in shown, shown[-3000:]

    forced = _ftwiz(config, "--launch", "--yes", "--force")
    assert forced.returncode != 0
    # The node side's own words, as they came, with the shipped copy's path mapped back to the user's code dir.
    line = next((x for x in forced.stdout.splitlines() if "| ERROR: trian.py not found in" in x), None)
    assert line is not None, forced.stdout[-3000:]
    assert f"trian.py not found in {config.parent}: did you mean train.py?" in line
    assert "first error from the nodes: here/" in forced.stderr
    # ... and `ftwiz --why` puts ftwiz's own words first, naming the script.
    why = _ftwiz(config, "--why", "--json")
    first = json.loads(why.stdout)["diagnoses"][0]
    assert first["cause"] == "code.error" and "trian.py" in first["explanation"], why.stdout[-3000:]


async def test_the_wizard_shows_the_same_progress_with_an_eta(tmp_path):
    from tests.tui.screen_text import flat_text
    from tests.tui.waiting import wait_for
    from tui.app.app import FtwizApp
    from tui.app.screens.checklist_screen import ChecklistScreen
    from tui.app.screens.confirm_screen import ConfirmScreen
    from tui.app.screens.launch_screen import LaunchScreen
    from tui.config_io import load_config
    from tui.launch.run import RunOptions
    from tui.local_agent import LocalAgent

    loaded = load_config(str(_project(tmp_path, total=400)))
    config = loaded.config
    app = FtwizApp(config, loaded.path, poll_interval=2, start_step="checklist",
                   engines={"run_options": RunOptions(runs_dir=tmp_path / "runs", stop_grace_s=2.0)})
    with LocalAgent(config, log_path=tmp_path / "agent.log"):
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
            await pilot.press("r")
            await wait_for(pilot, lambda: app.checks.runs >= 1, what="the checklist", timeout=180)
            assert not app.checks.failed, [(r.id, r.node, r.detail) for r in app.checks.failed]
            text = flat_text(app)
            assert "2 CPU ranks, gloo" in text and "hang or crash" not in text
            await pilot.press("l")
            await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
            assert "your code: train.py" in flat_text(app)
            await pilot.press("l")
            await wait_for(pilot, lambda: re.search(r"step \d+/400 +loss [0-9.]+ +ETA \d+:\d\d", flat_text(app)),
                           what="step, loss and ETA in the launch view", timeout=240)
            assert app.launch.snapshot.world_size == 2
            await pilot.press("s")  # stop every rank (behind a confirmation)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop question")
            await pilot.click("#stop")
            await wait_for(pilot, lambda: app.launch.result is not None, what="the stop", timeout=120)
            assert app.launch.result.status == "stopped"


#: Imported only for what the headless launch of a local node does not do: a terminal table (rich; click and pygments
#: with httpx's own CLI), the wizard, SSH, and torch in the controller.
UNUSED_ON_THE_HEADLESS_PATH = ("rich", "click", "pygments", "textual", "paramiko", "torch")


def test_a_one_line_script_starts_without_importing_what_the_headless_path_does_not_use(tmp_path):
    """The fast start (issue 19): the whole checklist, the run, the node's last line and the verdict, with its own
    local agent stopped at exit; the controller imports none of :data:`UNUSED_ON_THE_HEADLESS_PATH`."""
    config = _project(tmp_path, "one.py")
    (config.parent / "one.py").write_text('print("hello from rank", __import__("os").environ["RANK"], flush=True)\n')
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tui.cli", "--config", str(config), "--launch", "--yes"], cwd=config.parent,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    assert "checklist passed" in done.stderr and "SUCCEEDED (exit 0)" in done.stderr  # the last words are flushed
    assert "here/0 | hello from rank 0" in done.stdout and "here/1 | hello from rank 1" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "tui.launch.commands" in imported and "tui.client" in imported
    assert not imported & set(UNUSED_ON_THE_HEADLESS_PATH), sorted(imported & set(UNUSED_ON_THE_HEADLESS_PATH))
    port = int(re.search(r"agent_port = (\d+)", config.read_text()).group(1))
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))  # the local agent ftwiz started is gone
        sock.listen()
