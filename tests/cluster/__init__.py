"""Multi-host test harness: nodes as network namespaces, each with its own sshd and ftwiz-agent.

Library: ``from tests.cluster import Cluster`` (see ``harness.py``); pytest fixtures ``cluster3`` and
``make_cluster`` come from ``tests/cluster/fixtures.py``, registered for every test folder by
``tests/conftest.py``. Left-overs of killed runs: ``python -m tests.cluster.reaper reap``.
"""

from tests.cluster.harness import Cluster, ClusterError, cluster_support_problem
from tests.cluster.node import AGENT_PORT, SSH_PORT, Node

__all__ = ["Cluster", "ClusterError", "Node", "cluster_support_problem", "AGENT_PORT", "SSH_PORT"]
