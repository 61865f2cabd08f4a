"""What a Slurm job id may look like: one rule for the Slurm client commands and the run records that store one.

A stored job id goes to ``squeue``, ``scontrol`` and ``scancel``; a record that said ``--me`` would cancel every
job of the user, so both the commands (``tui/slurm/slurmctl.py``) and ``run.json``'s schema (``tui/runs/record.py``)
refuse anything else.
"""

from __future__ import annotations

import re

__all__ = ["JOB_ID_PATTERN", "valid_job_id"]

JOB_ID_PATTERN = r"\d+(_\d+)?"
"""A Slurm job id: digits, or an array task ``<job>_<task>`` (matched whole: never an option like ``--me``)."""
_JOB_ID = re.compile(JOB_ID_PATTERN)


def valid_job_id(job_id: object) -> bool:
    """True when ``job_id`` is a string that is a whole Slurm job id (:data:`JOB_ID_PATTERN`)."""
    return isinstance(job_id, str) and _JOB_ID.fullmatch(job_id) is not None
