"""The error a user can fix, and how every workload reports it."""

from __future__ import annotations

import sys

from .protocol import emit

EXIT_BAD_INPUT = 2
EXIT_VERIFY_FAILED = 3


class WorkloadError(Exception):
    """A problem with the inputs or the hardware that the user can fix; ``message`` says how."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def report_error(message: str, *, rank: int) -> None:
    """An ``error`` line on stdout and the plain message on stderr (no traceback).

    Every failing rank prints its own copy: torchrun stops a node's other workers as soon as one fails, so
    waiting for "the" rank that should speak could leave the log without any message.
    """
    emit("error", rank=rank, message=message)
    print(f"ftwiz: error (rank {rank}): {message}", file=sys.stderr, flush=True)


def note(message: str, *, rank: int, show: bool = True) -> None:
    """A ``note`` line (a fallback the user should know of) and, when ``show``, the text on stderr."""
    emit("note", rank=rank, message=message)
    if show:
        print(f"ftwiz: note: {message}", file=sys.stderr, flush=True)
