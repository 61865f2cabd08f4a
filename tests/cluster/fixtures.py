"""pytest plugin: namespace-cluster fixtures for every test folder (registered in ``tests/conftest.py``).

* ``cluster3``: three nodes with sshd and agents, built once per session and healed before each test
  (link up, MTU 1500, nft rules gone, stray processes killed, sshd/agents restarted if stopped), so a
  test may cut links, block ports or stop daemons freely.
* ``make_cluster(n, **kw)``: a factory for clusters of your own (``Cluster.create`` keywords); each is
  torn down when the test ends.
* ``cluster_support``: skip (or, with ``CI=true``, fail) unless clusters can be built here.

Skip policy: skip only when not root or a tool is missing; with ``CI=true`` those FAIL instead, because
CI runs as root and a skipped multi-node suite there would hide a broken harness.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Iterator

import pytest

from tests.cluster.harness import Cluster, ClusterError, cluster_support_problem

__all__ = ["cluster3", "make_cluster", "cluster_support", "require_cluster_support", "in_ci", "skip_or_fail"]


def in_ci() -> bool:
    """Whether the ``CI`` environment variable says we run in CI."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def skip_or_fail(problem: str | None, what: str) -> None:
    """Nothing when ``problem`` is None; otherwise skip the test with it, or under ``CI=true`` fail: "CI=true but
    ``what`` cannot run: ``problem``" (the skip policy above)."""
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI=true but {what} cannot run: {problem}", pytrace=False)
    pytest.skip(problem)


def require_cluster_support(*, need_sshd: bool = True, need_agent: bool = True) -> None:
    """Skip the test when clusters cannot be built here; in CI fail with the reason instead."""
    skip_or_fail(cluster_support_problem(need_sshd=need_sshd, need_agent=need_agent), "the namespace-cluster tests")


def _build(n: int, **kw) -> Cluster:
    require_cluster_support(need_sshd=kw.get("sshd", True), need_agent=kw.get("agent", True))
    try:
        return Cluster.create(n, **kw)
    except ClusterError as exc:
        pytest.fail(f"could not build a {n}-node namespace cluster: {exc}", pytrace=False)


@pytest.fixture
def cluster_support() -> None:
    """Skip (or fail in CI) unless namespace clusters with sshd can be built here (agents not needed)."""
    require_cluster_support(need_agent=False)


@pytest.fixture(scope="session")
def _cluster3_session(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    cluster = _build(3)
    request.addfinalizer(cluster.close)
    yield cluster


@pytest.fixture
def cluster3(_cluster3_session: Cluster) -> Cluster:
    """Three namespace nodes (``node0..2``) with sshd and agents, healthy at the start of the test."""
    try:
        _cluster3_session.heal()
    except ClusterError as exc:
        pytest.fail(f"the shared 3-node cluster could not be restored after an earlier test: {exc}", pytrace=False)
    return _cluster3_session


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., Cluster]]:
    """Factory ``make_cluster(n=2, **Cluster.create keywords)``; every cluster it made is torn down after the test."""
    made: list[Cluster] = []

    def factory(n: int = 2, **kw) -> Cluster:
        cluster = _build(n, **kw)
        made.append(cluster)
        return cluster

    yield factory
    for cluster in made:
        cluster.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that builds clusters as ``cluster`` (so ``-m 'not cluster'`` leaves them out)."""
    for item in items:
        if {"cluster3", "make_cluster", "cluster_support"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM into KeyboardInterrupt so pytest runs fixture teardown (clusters included) on ``kill``.

    SIGKILL cannot be caught: each cluster's watchdog process tears it down then.
    """
    config.addinivalue_line("markers", "cluster: builds network-namespace nodes (needs root)")
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)


def _sigterm_to_interrupt(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the run at once
    raise KeyboardInterrupt(f"signal {signum}")
