"""Root conftest: fixtures every test folder may use.

The namespace-cluster fixtures (``cluster3``, ``make_cluster``, ``cluster_support``) live in
``tests/cluster/fixtures.py``; see ``tests/cluster/__init__.py`` for the library behind them.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.assets import tiny_llama

pytest_plugins = ["tests.cluster.fixtures"]

# Every run record a test creates is added to the per-user run index (tui.runs.index): keep it out of the
# real home, one state directory per test session (subprocesses inherit it).
os.environ["XDG_STATE_HOME"] = _STATE_HOME = tempfile.mkdtemp(prefix="ftwiz-test-state-")
_STATE_OWNER = os.getpid()


@atexit.register
def _remove_state_home() -> None:
    """The state directory goes when the process that made it exits (not a forked child running its exit handlers)."""
    if os.getpid() == _STATE_OWNER:
        shutil.rmtree(_STATE_HOME, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest work first, so the xdist workers finish together instead of one idling through a long tail.

    Tests kept on one worker (an ``xdist_group``: a Slurm cluster's fixed ports, a module fixture that builds a
    cluster or runs every induced failure once) go first, then the namespace-cluster tests and the ``slow`` ones
    (torchrun, torch workloads, the fuzzing and drawing sweeps), then the fast ones, which fill the gaps at the end.
    A stable sort: within each kind, the order is the files' own.
    """

    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("xdist_group") is not None:
            return 0
        if item.get_closest_marker("cluster") is not None or item.get_closest_marker("slow") is not None:
            return 1
        return 2

    items.sort(key=weight)


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The workloads' tiny Llama and 200 JSONL records, built once for every worker (tests/assets.py)."""
    return tiny_llama(tmp_path_factory)
