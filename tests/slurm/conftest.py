"""Fixtures for the Slurm tests: one real Slurm cluster per test module (``slurm3``).

Skip policy as for every namespace-cluster test (``tests/cluster/fixtures.py``): skip only when not root or a
tool is missing; with ``CI=true`` fail instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.fixtures import skip_or_fail
from tests.cluster.harness import ClusterError
from tests.cluster.slurm import SlurmCluster, slurm_support_problem


def require_slurm_support() -> None:
    """Skip the test when a Slurm test cluster cannot be built here; in CI fail with the reason instead."""
    skip_or_fail(slurm_support_problem(), "the Slurm tests")


@pytest.fixture(scope="module")
def slurm3() -> Iterator[SlurmCluster]:
    """Three slurmd nodes (``node0..2``, all idle) plus one declared node that never starts (``node3``)."""
    require_slurm_support()
    try:
        cluster = SlurmCluster.create(3, ghost_nodes=1)
    except ClusterError as exc:
        pytest.fail(f"could not build a 3-node Slurm cluster: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test using a Slurm cluster as ``cluster`` (so ``-m 'not cluster'`` leaves them out), and put them
    in one ``xdist_group``: each module's Slurm takes the same fixed ports (slurmctld, slurmd), so under
    pytest-xdist (``make test``) they run one after the other on one worker."""
    for item in items:
        if "slurm3" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.xdist_group("slurm"))
