"""The wizard as the snapshot tests draw it: real loopback agents, one poll, fixed history.

Still pictures need still data: the app polls the real agents once (``poll_limit=1``) through
:class:`FrozenClient` (this machine's changing host values held fixed), and the 60 s utilisation
history is pre-filled from a fixed wave instead of a minute of waiting. The checklist runs the real
engine on the checks whose output does not depend on timing (no latency, bandwidth or clock rows,
no SSH).
"""

from __future__ import annotations

from typing import Any, Optional

from tests.tui.fixture_cluster import wave
from tests.tui.frozen_client import FrozenClient
from tui.app.app import FtwizApp

STILL_CHECKS = ["agent.version", "gpu.", "env.", "mem.", "plan."]
"""Checks whose rows are the same on every run against the fixture agents (disk rows name temp paths)."""


async def still_checklist(config: Any, **kwargs: Any) -> Any:
    """The real checklist engine, limited to :data:`STILL_CHECKS` and without SSH logins."""
    from tui.checks.engine import run_checklist_full

    kwargs["only"] = kwargs.get("only") or STILL_CHECKS
    kwargs["ssh"] = False
    return await run_checklist_full(config, **kwargs)


def still_config(config: Any) -> Any:
    """``config`` with every node's interpreter set to the one the frozen reports describe."""
    from shared.config import FtwizConfig
    from tests.tui.fixture_cluster import CONSTRUCTED_PYTHON

    data = config.model_dump()
    data["job"] = config.job.model_dump(exclude_unset=True)  # an undeclared model stays undeclared
    for node in data["nodes"]:
        node["python"] = CONSTRUCTED_PYTHON
        node["workdir"] = "~/ftwiz"
    return FtwizConfig.model_validate(data)


def snapshot_app(config: Any, *, start_step: str = "cluster", engines: Optional[dict] = None) -> FtwizApp:
    """The wizard over ``config`` (see :func:`still_config`) with one frozen poll and 59 s of fixed history per node."""
    config = still_config(config)
    app = FtwizApp(config, None, client_factory=FrozenClient, poll_limit=1, poll_interval=3600, start_step=start_step,
                   engines={"run_checklist": still_checklist, **(engines or {})})
    gpu_counts = {"node0": 8, "node1": 1}
    for number, node in enumerate(config.nodes):
        if node.name not in app.cluster.nodes or node.name not in gpu_counts:
            continue
        gpus = {index: [wave(step, index, number) for step in range(59)] for index in range(gpu_counts[node.name])}
        mean = [sum(values[step] for values in gpus.values()) / len(gpus) for step in range(59)]
        app.cluster.seed_history(node.name, mean, gpus)
    return app
