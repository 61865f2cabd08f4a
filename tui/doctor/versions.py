"""What the cluster knew about versions: the agents' last reports, kept in ``run.json`` as ``versions``.

Differing torch / CUDA / NCCL / Python / driver versions between nodes are ``version.skew`` even when the
log shows only a garbled socket error or a hang: the version mismatch comes first then, because those
errors are how a mismatch looks from inside (NVIDIA/nccl#286, huggingface/accelerate#412).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.doctor_signatures import CAUSES

from .model import Diagnosis, Evidence

__all__ = ["place_skew", "skew_diagnosis", "versions_from_reports"]

_FIELDS = ("torch", "torch_cuda", "nccl", "python")
#: Log causes a version mismatch hides behind (the mismatch goes first when one of these leads).
_MASKS = ("net.peer_lost", "nccl.timeout", "rendezvous", "unknown", "net.interface")
_SOURCE = "NVIDIA/nccl#286, huggingface/accelerate#412: differing torch/NCCL versions hang or break at the first collective"


def versions_from_reports(reports: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{node: {torch, torch_cuda, nccl, python, driver}}`` from the agents' ``NodeReport`` s."""
    out: dict[str, dict[str, Any]] = {}
    for node, report in reports.items():
        software = getattr(report, "software", None)
        row = {name: getattr(software, name, None) for name in _FIELDS}
        row["driver"] = getattr(report, "driver_version", None)
        out[node] = row
    return out


def skew_diagnosis(versions: Mapping[str, Mapping[str, Any]]) -> Diagnosis | None:
    """A ``version.skew`` diagnosis when a version differs between nodes (unknown values ignored)."""
    differing = []
    for name in (*_FIELDS, "driver"):
        seen = {node: row.get(name) for node, row in versions.items() if row.get(name)}
        if len(set(seen.values())) > 1:
            differing.append((name, seen))
    if not differing:
        return None
    evidence = [Evidence("run.json", 0, f"versions.{name}: " + ", ".join(f"{node}={value}" for node, value in sorted(seen.items())))
                for name, seen in differing]
    names = ", ".join(name for name, _ in differing)
    odd = _odd_nodes(differing)
    explanation = f"{CAUSES['version.skew']}: {names} differ between nodes (the agents' last reports at launch)"
    fix = (f"install the same {names} on every node" + (f" (different on {', '.join(odd)})" if odd else "")
           + "; `ftwiz --check` compares them before launch")
    return Diagnosis("version.skew", odd[0] if len(odd) == 1 else None, None, evidence, explanation, fix)


def place_skew(diagnoses: list[Diagnosis], skew: Diagnosis | None) -> list[Diagnosis]:
    """The skew first when the log leads with what a mismatch looks like; else after the root causes."""
    if skew is None:
        return diagnoses
    if not diagnoses or diagnoses[0].echo or diagnoses[0].cause in _MASKS:
        return [skew, *diagnoses]
    roots = [d for d in diagnoses if not d.echo]
    return [*roots, skew, *[d for d in diagnoses if d.echo]]


def _odd_nodes(differing: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The nodes whose value is in the minority for some field (the ones to reinstall)."""
    odd: set[str] = set()
    for _name, seen in differing:
        counts: dict[Any, int] = {}
        for value in seen.values():
            counts[value] = counts.get(value, 0) + 1
        majority = max(counts.values())
        if list(counts.values()).count(majority) == 1:
            odd |= {node for node, value in seen.items() if counts[value] < majority}
    return sorted(odd)
