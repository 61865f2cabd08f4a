"""Printing diagnoses: the ``--json`` document, plain text, and the one-line first diagnosis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .model import Diagnosis

__all__ = ["as_json", "format_first", "format_text"]


def as_json(diagnoses: Sequence[Diagnosis]) -> dict[str, Any]:
    """``{"diagnoses": [...]}``, most likely root cause first (the ``--json`` document)."""
    return {"diagnoses": [d.as_dict() for d in diagnoses]}


def format_first(diagnoses: Sequence[Diagnosis]) -> str:
    """The most likely cause in a few lines (what a failed run ends with); empty when there is none."""
    if not diagnoses:
        return ""
    first = diagnoses[0]
    lines = [f"why: {first.cause} — {first.explanation}"]
    if first.evidence:
        ev = first.evidence[0]
        lines.append(f"  evidence: {ev.file}:{ev.line}: {ev.text}")
    lines.append(f"  fix: {first.fix}")
    return "\n".join(lines)


def format_text(diagnoses: Sequence[Diagnosis]) -> str:
    """Every diagnosis with its evidence lines and fix; echoes marked as such."""
    if not diagnoses:
        return "no diagnosis: nothing in these logs points to a failure"
    out: list[str] = []
    for number, diag in enumerate(diagnoses, 1):
        tag = " (echo)" if diag.echo else ""
        confirmed = {True: " [confirmed]", False: " [unconfirmed]"}.get(diag.confirmed, "") if diag.confirmed is not None else ""
        out.append(f"{number}. {diag.cause}{confirmed}{tag}: {diag.explanation}")
        for ev in diag.evidence:
            out.append(f"     {ev.file}:{ev.line}: {ev.text}")
        out.append(f"   fix: {diag.fix}")
    return "\n".join(out)
