"""The failure doctor: why a run failed, from its logs and record, root cause first (``ftwiz --why``).

``diagnose_run(run_dir, record)`` reads ``runs/<id>/*.log`` and ``run.json``; ``diagnose_files(paths)``
reads any logs (a file named ``NODE.log`` is that node's). Both return :class:`Diagnosis` items, most
likely root cause first, echoes of another rank's death demoted, and an empty list when nothing points
to a failure. The signatures are data in ``shared/doctor_signatures.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shared.protocol import Started, parse_line

from .checklist import cite_checklist
from .diagnose import KernelLookup, rank_findings
from .findings import find
from .logs import read_log
from .model import Diagnosis, Evidence, ReadLine
from .report import as_json, format_first, format_text
from .versions import place_skew, skew_diagnosis

__all__ = [
    "Diagnosis",
    "Evidence",
    "KernelLookup",
    "as_json",
    "diagnose_files",
    "diagnose_lines",
    "diagnose_run",
    "format_first",
    "format_text",
]


def diagnose_run(run_dir: Path, record: Mapping[str, Any] | None = None, *,
                 kernel: KernelLookup | None = None) -> list[Diagnosis]:
    """Diagnose a run record directory (``run.json`` read when ``record`` is not given)."""
    run_dir = Path(run_dir)
    if record is None:
        from tui.runs.record import RunRecordModel, load_record

        try:  # through the typed model (the id defaults to the directory's name): a damaged record is no evidence
            data = {"run_id": run_dir.name, **load_record(run_dir.parent, run_dir.name)}
            record = RunRecordModel.model_validate(data).model_dump(mode="json")
        except (OSError, ValueError, RecursionError):
            record = None
    logs = sorted(p for p in run_dir.glob("*.log") if p.is_file())
    return diagnose_files(logs, record=record, kernel=kernel)


def diagnose_files(paths: Sequence[Path], *, record: Mapping[str, Any] | None = None,
                   kernel: KernelLookup | None = None) -> list[Diagnosis]:
    """Diagnose log files (OSError for one that cannot be read)."""
    lines: list[ReadLine] = []
    for path in paths:
        lines.extend(read_log(Path(path), start_order=lines[-1].order if lines else 0))
    return diagnose_lines(lines, record=record, kernel=kernel)


def diagnose_lines(lines: Sequence[ReadLine], *, record: Mapping[str, Any] | None = None,
                   kernel: KernelLookup | None = None) -> list[Diagnosis]:
    """Diagnose lines already read (``record["versions"]``, when present, can add ``version.skew``)."""
    found = rank_findings(find(lines, pid_ranks=_pid_ranks(lines, record)), lines, record=record, kernel=kernel)
    versions = (record or {}).get("versions")
    if found and isinstance(versions, Mapping):
        found = place_skew(found, skew_diagnosis({node: row for node, row in versions.items() if isinstance(row, Mapping)}))
    return cite_checklist(found, record)


def _pid_ranks(lines: Sequence[ReadLine], record: Mapping[str, Any] | None) -> dict[tuple[str | None, int], int]:
    """Which global rank each worker pid was: from the run record's ranks, else the ``started`` lines."""
    out: dict[tuple[str | None, int], int] = {}
    ranks = (record or {}).get("ranks")
    for rank, info in (ranks.items() if isinstance(ranks, Mapping) else ()):
        pid, number = _int(info.get("pid")) if isinstance(info, Mapping) else None, _int(rank)
        if pid is not None and number is not None:
            node = info.get("node")
            out[(node if isinstance(node, str) else None, pid)] = number
            out[(None, pid)] = number
    for line in lines:
        started = parse_line(line.text) if '"started"' in line.text else None
        if isinstance(started, Started):
            pid, number = started.pid, started.rank
            if pid is not None and number is not None:
                out.setdefault((line.node, pid), number)
                out.setdefault((None, pid), number)
    return out


def _int(value: Any) -> int | None:
    """``value`` as an int when it is one (or its digits), else None: a record's numbers are not trusted."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None
