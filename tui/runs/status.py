"""A run's status, one enum for the record, the supervisor and the results.

Transitions (the supervisor's)::

    STARTING ──launch ok──▶ RUNNING ──every node exited 0──▶ SUCCEEDED
       │                      ├──a rank failed / node lost / stall──▶ STOPPING ──▶ FAILED
       │                      ├──operator's stop / ftwiz --stop─────▶ STOPPING ──▶ STOPPED
       │                      └──detach / every node silent too long──▶ DETACHED ──attach──▶ RUNNING
       ├──a node could not be prepared or started──▶ LAUNCH_FAILED
       └──the operator said no──▶ CANCELLED
"""

from __future__ import annotations

from enum import Enum

__all__ = ["ENDED", "NEVER_RAN", "RunStatus"]


class RunStatus(str, Enum):
    """Where a run stands (``str``: compares equal to its value, stored as its value in ``run.json``)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    DETACHED = "detached"
    LAUNCH_FAILED = "launch_failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


NEVER_RAN = frozenset({RunStatus.CANCELLED, RunStatus.LAUNCH_FAILED})
"""Records that never ran anything: not "the last run" for ``--resume`` or ``--attach``."""

ENDED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.LAUNCH_FAILED, RunStatus.CANCELLED})
"""Final records: their process groups are never signalled again (group ids are reused); ``ftwiz --stop`` of
such a run says it already finished and only reaps, by the run's tag, nodes the record lists as unreaped."""
