"""``[job]`` of the "command" workload: what a command, a requirement and a progress regex may look like (pure)."""

from __future__ import annotations

import re
from typing import Optional

from shared.nodewire import NODE_ENV, RUN_ENV

__all__ = ["PROGRESS_GROUPS", "REQUIREMENT_RE", "RESERVED_ENV", "check_command", "check_progress_regex"]

#: One pip requirement: a name, optional extras, optional version specifiers (PEP 508 without markers).
REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]+\])?\s*((===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$")
#: Environment torchrun or ftwiz sets for every rank: ``[job].env`` may not override it.
RESERVED_ENV = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                          "MASTER_PORT", "TORCHELASTIC_RUN_ID", RUN_ENV, NODE_ENV, "CUDA_VISIBLE_DEVICES"})
#: Named groups ``progress_regex`` may use.
PROGRESS_GROUPS = ("step", "total", "loss", "lr", "epoch")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def check_command(value: list[str]) -> list[str]:
    """``[job].command``: a script path or ``-m module``, then arguments; raise ValueError with the fix."""
    if not value:
        return value
    first = value[0]
    if first == "-m":
        if len(value) < 2 or not _MODULE_RE.fullmatch(value[1]):
            raise ValueError('after "-m" give a module name, e.g. ["-m", "axolotl.cli.train", "cfg.yml"]')
    elif first.startswith("-") or not first.strip():
        raise ValueError(f'the first word must be your script (e.g. "train.py") or "-m" and a module, not {first!r}')
    return value


def check_progress_regex(value: Optional[str]) -> Optional[str]:
    """``[job].progress_regex``: compiles, and its named groups are among :data:`PROGRESS_GROUPS`."""
    if value is None or value == "":
        return None
    try:
        pattern = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    unknown = sorted(set(pattern.groupindex) - set(PROGRESS_GROUPS))
    if unknown:
        raise ValueError(f"unknown named group(s) {', '.join(unknown)}: use {', '.join(PROGRESS_GROUPS)}, e.g. r\"step (?P<step>\\d+) loss (?P<loss>[0-9.]+)\"")
    if not {"step", "loss"} & set(pattern.groupindex):
        raise ValueError("needs a named group step or loss, e.g. r\"step (?P<step>\\d+)/(?P<total>\\d+) loss (?P<loss>[0-9.]+)\"")
    return value
