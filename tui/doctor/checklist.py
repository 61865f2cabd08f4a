"""What the checklist said before the run: a warned or failed row that matches a diagnosis is cited.

A launch keeps its checklist rows in ``run.json`` (``checklist``); a row the user forced past with
``--force``, or a warning, is often the cause the log only echoes. Pure: diagnoses and the record in,
the same diagnoses with the rows cited in their explanation out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .model import Diagnosis

__all__ = ["RELATED_CHECKS", "cite_checklist"]

#: Cause id → the check ids (or id prefixes, ending in ".") whose warning bears on it.
RELATED_CHECKS: dict[str, tuple[str, ...]] = {
    "oom.gpu": ("mem.fit", "gpu.processes"),
    "oom.host": ("mem.fit",),
    "nccl.timeout": ("net.", "env.parity", "clock.skew"),
    "rendezvous": ("rendezvous.", "net.master_address", "net.subnet"),
    "port.in_use": ("rendezvous.port_free",),
    "net.interface": ("net.subnet", "net.ifname", "net.master_address"),
    "net.peer_lost": ("net.", "agent.reachable"),
    "p2p.topology": ("net.ib", "gpu.", "net.mtu"),
    "version.skew": ("env.parity", "env.packages", "agent.version", "job.requires"),
    "disk.full": ("disk.free",),
    "hub.access": ("data.reachable",),
    "data.invalid": ("data.reachable",),
    "ddp.usage": ("plan.",),
    "code.error": ("job.code", "job.requires"),
}


def _related(check_id: str, wanted: Sequence[str]) -> bool:
    return any(check_id == w or (w.endswith(".") and check_id.startswith(w)) for w in wanted)


def cite_checklist(diagnoses: list[Diagnosis], record: Mapping[str, Any] | None) -> list[Diagnosis]:
    """Cite, in each root-cause diagnosis, the checklist rows of the run that warned or failed on its subject."""
    rows = [r for r in (record or {}).get("checklist") or [] if isinstance(r, Mapping) and r.get("status") in ("warn", "fail")]
    if not rows:
        return diagnoses
    for diag in diagnoses:
        if diag.echo:
            continue
        wanted = RELATED_CHECKS.get(diag.cause, ())
        cited = [r for r in rows if _related(str(r.get("id", "")), wanted) and (diag.node is None or r.get("node") in (None, diag.node))]
        if not cited:
            continue
        said = "; ".join(f"{r.get('id')} {str(r.get('status')).upper()}{' on ' + str(r['node']) if r.get('node') else ''}: {r.get('detail')}"
                         for r in cited[:3])
        forced = " (the launch went ahead despite a failed check: --force)" if any(r.get("status") == "fail" for r in cited) else ""
        diag.explanation = f"{diag.explanation} The checklist before this run said: {said}{forced}."
    return diagnoses
