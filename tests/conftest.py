"""Root conftest: fixtures every test folder may use.

The namespace-cluster fixtures (``cluster3``, ``make_cluster``, ``cluster_support``) live in
``tests/cluster/fixtures.py``; see ``tests/cluster/__init__.py`` for the library behind them.
"""

import os
import tempfile

pytest_plugins = ["tests.cluster.fixtures"]

# Every run record a test creates is added to the per-user run index (tui.runs.index): keep it out of the
# real home, one state directory per test session (subprocesses inherit it).
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="ftwiz-test-state-")
