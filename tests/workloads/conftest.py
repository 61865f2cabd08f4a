"""Fixtures: the workloads package copied the way the launcher ships it, the tiny model and dataset."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workloads.helpers import PACKAGE, SOURCE, workload_env
from tui.launch.support import SHIPPED_SHARED


@pytest.fixture(scope="session")
def rundir(tmp_path_factory) -> Path:
    """A run dir holding ``ftwiz_workloads`` and the ``shared`` modules it imports, copied as the launcher ships them."""
    root = tmp_path_factory.mktemp("rundir")
    shutil.copytree(SOURCE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "shared").mkdir()
    for path in SHIPPED_SHARED:  # as tui.launch.support ships them
        shutil.copyfile(SOURCE.parents[1] / path, root / path)
    return root


@pytest.fixture(scope="session")
def tiny_model(rundir, tmp_path_factory) -> Path:
    """The tiny Llama + tokenizer, built by ``python -m ftwiz_workloads.tiny model``."""
    path = tmp_path_factory.mktemp("model") / "tiny-llama"
    subprocess.run([sys.executable, "-m", f"{PACKAGE}.tiny", "model", str(path)], env=workload_env(rundir),
                   cwd=rundir, check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="session")
def tiny_dataset(rundir, tmp_path_factory) -> Path:
    """300 mixed-format JSONL records from ``python -m ftwiz_workloads --make-tiny-dataset``."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    subprocess.run([sys.executable, "-m", PACKAGE, "--make-tiny-dataset", str(path)], env=workload_env(rundir),
                   cwd=rundir, check=True, capture_output=True, timeout=60)
    return path
