"""The supervision knobs and the launch error (shared by the driver's parts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

__all__ = ["LaunchError", "RunOptions"]


@dataclass
class RunOptions:
    """Supervision knobs (defaults suit real clusters; tests shorten some)."""

    stop_grace_s: float = 3.0
    """Seconds between SIGTERM and SIGKILL."""
    unreachable_after_s: Optional[float] = None
    """Silence after which a node counts as unreachable; default 3 × ``ssh_keepalive_s`` (at least 4 s)."""
    reap_for_s: float = 120.0
    """How long to keep trying to reap an unreachable node's processes after a stop."""
    reap_connect_timeout_s: float = 5.0
    """SSH connect timeout of each reap attempt."""
    dump_wait_s: float = 2.0
    """Seconds to collect stack dumps before a stall stop."""
    tick_s: float = 1.0
    """How often the node helper sends a liveness tick (and samples the workers)."""
    reattach_for_s: float = 600.0
    """When every node went silent at once: how long to keep trying to re-attach before detaching."""
    last_lines: int = 20
    """Log lines kept for the failure report."""
    runs_dir: Optional[Path] = None
    """Where ``runs/<run id>`` goes; default ``$FTWIZ_RUNS_DIR`` or ``./runs``."""
    link_factory: Optional[Callable[..., Any]] = None
    """The node transport (``factory(node, cluster, timeout=...) -> NodeLink``); None: SSH, or subprocesses for
    ``local`` nodes. The Slurm backend passes job steps (:func:`tui.slurm.link.srun_link_factory`)."""
    on_run: Optional[Callable[[Any], None]] = None
    """Called with the :class:`tui.launch.run.Run` once it exists (launch, attach, stop): a backend records
    its part in ``run.json`` and watches what only it can see (the Slurm job's state)."""


class LaunchError(Exception):
    """The run could not start; nothing was left running. ``problems`` maps node → message (with hint)."""

    def __init__(self, message: str, problems: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = dict(problems or {})

    def __str__(self) -> str:
        lines = [self.message] + [f"  {node}: {text}" for node, text in self.problems.items()]
        return "\n".join(lines)
