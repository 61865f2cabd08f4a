"""The doctor at the end of a failed run: diagnose, keep the list in ``run.json``, say the first one.

Called by the supervisor's finish (``tui/launch/base.py``) with the run's record directory and data;
never raises (a doctor that fails must not take the run's ending with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

WHY_PREFIX = "why: "
"""Notes that carry the first diagnosis start with this (the headless printer and the TUI look for it)."""

__all__ = ["WHY_PREFIX", "diagnose_finished_run", "why_note"]


def diagnose_finished_run(run_dir: Path, record: Mapping[str, Any], config: Any = None,
                          reports: Mapping[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """``(diagnoses as run.json keeps them, versions by node from the agents' reports, the first diagnosis as a note)``."""
    from . import diagnose_run, format_first
    from .kernel import agent_kernel_lookup
    from .versions import versions_from_reports

    try:
        versions = versions_from_reports(reports or {})
        kernel = agent_kernel_lookup(config) if config is not None else None
        found = diagnose_run(run_dir, {**record, "versions": versions} if versions else record, kernel=kernel)
    except Exception as exc:
        return [], {}, f"{WHY_PREFIX}the failure doctor could not read the logs ({type(exc).__name__}: {exc})"
    return [d.as_dict() for d in found], versions, format_first(found)


def why_note(notes: list[tuple[str, str]]) -> str:
    """The last first-diagnosis note among ``(level, text)`` notes, or ``""``."""
    return next((text for _level, text in reversed(notes) if text.startswith(WHY_PREFIX)), "")
