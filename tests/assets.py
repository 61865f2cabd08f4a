"""Test inputs built once per test session and shared by every pytest-xdist worker: the tiny models and datasets.

A model build imports transformers (about 7 s of CPU here); five modules each built their own copy on each worker.
``built_once`` builds a directory under the session's shared temporary directory while holding a lock, so the
first worker to ask builds it and the others wait for it and reuse it. It is keyed by name only: each test
session (``pytest-N``) starts empty, and nothing is reused across sessions.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this test session shares (pytest-N), or this process's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``session_dir/name``, made by ``build(directory)`` the first time any worker asks (under a lock)."""
    root = session_dir(tmp_path_factory) / "shared-assets"
    root.mkdir(mode=0o755, exist_ok=True)
    root.chmod(0o755)  # readable by any user, as the fixtures' own directories were (the nodes run as root here)
    target = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this worker dies
        if not (target / ".built").is_file():
            partial = root / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)  # a worker that died half-way
            partial.mkdir(mode=0o755)
            build(partial)
            (partial / ".built").write_text("")
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
    return target


def make(*argv: str) -> None:
    """Run ``python -m agent.workloads[.tiny] ...`` from the repository (the workloads' own generators)."""
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The workloads' tiny Llama (``--make-tiny-model``) and 200 JSONL records (``--make-tiny-dataset``)."""

    def build(base: Path) -> None:
        make("-m", "agent.workloads", "--make-tiny-model", str(base / "model"))
        make("-m", "agent.workloads", "--make-tiny-dataset", str(base / "train.jsonl"), "--records", "200")

    base = built_once(tmp_path_factory, "tiny", build)
    return {"model": base / "model", "dataset": base / "train.jsonl"}


def llama_256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama at hidden 256 and 4 layers (about 4.1 M parameters: compute-bound, see bench/balance_bench.py)."""
    from bench.balance_bench import HIDDEN, LAYERS

    def build(base: Path) -> None:
        make("-m", "agent.workloads.tiny", "model", str(base / "model"), "--hidden-size", str(HIDDEN), "--layers", str(LAYERS))

    return built_once(tmp_path_factory, "llama-256", build) / "model"
