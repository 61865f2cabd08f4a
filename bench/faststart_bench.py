"""Start-up cost of a one-node run: ``ftwiz --launch --yes`` of a one-line script on this machine (one local node,
its own local agent, the whole checklist) beside ``torchrun --standalone --nproc-per-node=1`` of the same script.

Both are run as a user types them (ftwiz also once more with the local agent already running, which it reuses),
interleaved, ``--reps`` times each (5 by default, 2 with ``--quick``), after one
untimed run of each (a user's second launch: the training interpreter's version probe cached, byte code written, as
torch's own is; ``PYTHONDONTWRITEBYTECODE`` is dropped from the environment for the same reason). The rows give the
median wall time and CPU seconds (the command and every process it waited for: the agent, torchrun and the worker
included), ftwiz's beside torchrun's, and ftwiz's extra over torchrun (target: at most 1 s).

Run: ``python -m bench faststart`` (``--quick``: 2 of each).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT = 'print("hello from rank", __import__("os").environ["RANK"], flush=True)\n'
TARGET_EXTRA_S = 1.0


def run(args: Any) -> list[dict]:
    """The rows (see the module docstring)."""
    reps = int(getattr(args, "reps", 0) or (2 if getattr(args, "quick", False) else 5))
    with tempfile.TemporaryDirectory(prefix="ftwiz-faststart-") as tmp:
        base = Path(tmp)
        config = _project(base)
        ftwiz = [sys.executable, "-m", "tui.cli", "--config", str(config), "--launch", "--yes"]
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", str(base / "code" / "one.py")]
        env = {**os.environ, "XDG_CACHE_HOME": str(base / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        samples: dict[str, list[tuple[float, float]]] = {"ftwiz": [], "reused": [], "torchrun": []}
        for argv in (ftwiz, torchrun):  # warm-up, untimed
            _timed(argv, env=env, cwd=base)
        for _ in range(reps):
            samples["ftwiz"].append(_timed(ftwiz, env=env, cwd=base))
            with _running_agent(config, base):  # started before the command: not counted in its time
                samples["reused"].append(_timed(ftwiz, env=env, cwd=base))
            samples["torchrun"].append(_timed(torchrun, env=env, cwd=base))
    wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
    extra = wall["ftwiz"] - wall["torchrun"]
    note = f"median of {reps}, interleaved, after one untimed run of each; one-line script, one local node"
    reused = f"{note}; a local agent already running (reused, neither started nor stopped)"
    return [
        {"measure": "one-node start to end: ftwiz --launch --yes (wall)", "value": wall["ftwiz"], "unit": "s",
         "baseline": wall["torchrun"], "ratio": wall["ftwiz"] / wall["torchrun"], "target": f"extra <= {TARGET_EXTRA_S:g} s", "note": note},
        {"measure": "one-node start to end: ftwiz --launch --yes (CPU)", "value": cpu["ftwiz"], "unit": "CPU-s",
         "baseline": cpu["torchrun"], "ratio": cpu["ftwiz"] / cpu["torchrun"], "note": note},
        {"measure": "ftwiz's extra over torchrun --standalone (wall)", "value": extra, "unit": "s",
         "target": f"<= {TARGET_EXTRA_S:g}", "note": note},
        {"measure": "the same, local agent reused (wall)", "value": wall["reused"], "unit": "s", "baseline": wall["torchrun"],
         "ratio": wall["reused"] / wall["torchrun"], "note": reused},
        {"measure": "the same, local agent reused (CPU)", "value": cpu["reused"], "unit": "CPU-s", "baseline": cpu["torchrun"],
         "ratio": cpu["reused"] / cpu["torchrun"], "note": reused},
        {"measure": "ftwiz's extra over torchrun --standalone, agent reused (wall)", "value": wall["reused"] - wall["torchrun"],
         "unit": "s", "note": reused},
    ]


def _running_agent(config: Path, base: Path) -> Any:
    """The project's local agent, started (and waited for) here and stopped on leaving."""
    from tui.config_io import load_config
    from tui.local_agent import LocalAgent

    return LocalAgent(load_config(str(config)).config, log_path=base / "reused-agent.log")


def _timed(argv: list[str], *, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and every child it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[2:4]} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _project(base: Path) -> Path:
    (base / "code").mkdir()
    (base / "code" / "one.py").write_text(SCRIPT)
    config = base / "ftwiz.toml"
    config.write_text(f'''[cluster]
agent_port = {_free_port()}
rendezvous_port = {_free_port()}
agent_token_file = "{base / 'agent.token'}"

[[nodes]]
name = "here"
host = "127.0.0.1"
local = true
python = "{sys.executable}"
workdir = "{base / 'work'}"
cpu_ranks = 1

[job]
workload = "command"
command = ["one.py"]
code_dir = "code"
''')
    return config
