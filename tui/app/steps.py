"""The wizard's steps, in order, with the key that jumps to each."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["STEPS", "Step", "next_step", "previous_step"]


class Step(NamedTuple):
    """One wizard step."""

    name: str
    """Installed screen name, also the value a step screen dismisses with to go there."""
    title: str
    """Label in the step bar."""
    key: str
    """Key that jumps to it from anywhere."""


STEPS: tuple[Step, ...] = (
    Step("cluster", "Cluster", "f2"),
    Step("job", "Job", "f3"),
    Step("checklist", "Checklist", "f4"),
    Step("launch", "Launch", "f5"),
)
"""The steps in wizard order."""

_NAMES = [step.name for step in STEPS]


def next_step(name: str) -> str:
    """The step after ``name`` (the last one stays)."""
    index = _NAMES.index(name)
    return _NAMES[min(index + 1, len(_NAMES) - 1)]


def previous_step(name: str) -> str:
    """The step before ``name`` (the first one stays)."""
    index = _NAMES.index(name)
    return _NAMES[max(index - 1, 0)]
