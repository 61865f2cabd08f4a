"""The pre-launch checklist: small checks from the cluster's reports to pass/warn/fail/skip rows.

Public API (the launcher and the TUI use these):

- :class:`CheckResult` — ``id, title, status (pass|warn|fail|skip), node, detail, hint``; JSON via
  ``model_dump(mode="json")``.
- :func:`run_checklist` ``(config, *, client=None, progress=None, ssh=True, only=None, options=None)``
  — async; every row, checks run concurrently. :func:`run_checklist_sync` for synchronous callers.
- :func:`ok` ``(results) -> bool`` — nothing failed.
- :data:`CHECKS` — the registered checks (id, title, function).
"""

from tui.checks.base import CHECKS, CheckContext, CheckResult, CheckSpec, SshOutcome, Status, check
from tui.checks.engine import ORDER, ChecklistRun, Progress, ok, run_checklist, run_checklist_full, run_checklist_sync

# Importing the modules registers their checks (display order is engine.ORDER).
from tui.checks import agents, gpus, mesh, network, plan, rendezvous, resources, software, ssh_checks, sync, usercode  # noqa: F401  isort: skip

__all__ = [
    "CHECKS",
    "ORDER",
    "CheckContext",
    "ChecklistRun",
    "CheckResult",
    "CheckSpec",
    "Progress",
    "SshOutcome",
    "Status",
    "check",
    "ok",
    "run_checklist",
    "run_checklist_full",
    "run_checklist_sync",
]
