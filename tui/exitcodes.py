"""``ftwiz``'s process exit codes, in one place (the CLI, the headless launcher and the run results use these)."""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_STOPPED", "EXIT_USAGE"]

EXIT_OK = 0
"""Success: checks passed (warnings allowed), the job succeeded, was detached, or was stopped cleanly by ``--stop``."""
EXIT_FAILED = 1
"""A check failed, the job failed or could not start, a node could not be reached or reaped."""
EXIT_USAGE = 2
"""A config or usage problem: nothing was started."""
EXIT_STOPPED = 130
"""The operator stopped the run (Ctrl-C / SIGTERM), as a shell reports an interrupted command."""
