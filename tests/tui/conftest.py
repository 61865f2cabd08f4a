"""Fixtures of the wizard's tests: real agents on loopback, and app builders over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from tests.tui.agents import LoopbackCluster, start_agents
from tests.tui.frozen_client import FrozenClient
from tui.app.app import FtwizApp

LOOPBACK_NODES = [
    ("node0", "127.0.0.11", "h100-sxm-8x"),
    ("node1", "127.0.0.12", "rtx4090-1x"),
    ("node2", "127.0.0.13", None),
]
"""Three agents: 8× H100 (constructed), 1× RTX 4090 (constructed), and this GPU-less machine."""


@pytest.fixture(scope="session")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """Three real agents on 127.0.0.11-13, shared by the wizard's tests (nobody stops them)."""
    cluster = start_agents(tmp_path_factory.mktemp("tui-agents"), LOOPBACK_NODES)
    yield cluster
    cluster.close()


@pytest.fixture
def make_app(loopback: LoopbackCluster, tmp_path: Path) -> Callable[..., FtwizApp]:
    """``make_app(config=None, config_path=None, frozen=False, **kwargs)``: the wizard over the loopback agents.

    Without ``config`` it is the three agents plus ``node3``, a node whose agent is down.
    ``frozen=True`` uses :class:`FrozenClient` (fixed host values, for pictures).
    """

    def factory(config: Any = None, config_path: Optional[Path] = None, *, frozen: bool = False, **kwargs: Any) -> FtwizApp:
        config = config or loopback.config(down=["node3"])
        if frozen:
            kwargs.setdefault("client_factory", FrozenClient)
        return FtwizApp(config, config_path, **kwargs)

    return factory
