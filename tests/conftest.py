"""Root conftest: fixtures every test folder may use.

The namespace-cluster fixtures (``cluster3``, ``make_cluster``, ``cluster_support``) live in
``tests/cluster/fixtures.py``; see ``tests/cluster/__init__.py`` for the library behind them.
"""

pytest_plugins = ["tests.cluster.fixtures"]
