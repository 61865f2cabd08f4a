"""``ftwiz --why [RUN_ID]`` and ``ftwiz --why-log FILE...``: print the diagnoses (text or ``--json``).

Exit 0 when a diagnosis was printed or none was found, 2 for a usage error (no such run, no runs at all,
an unreadable file), naming what is missing. ``--why`` also asks the nodes' agents (from the config,
when one loads) for the kernel's OOM-kill record of a SIGKILLed worker.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tui.exitcodes import EXIT_OK, EXIT_USAGE

from . import as_json, diagnose_files, diagnose_run, format_text
from .diagnose import KernelLookup
from .logs import NotARegularFile, open_regular

__all__ = ["why_main"]


def _err(message: str) -> None:
    print(f"ftwiz: {message}", file=sys.stderr, flush=True)


def why_main(*, run_id: str | None, files: Sequence[str] | None, json_output: bool, config_path: str | None = None) -> int:
    """Diagnose a run (``run_id``; ``""`` for the latest) or log ``files``; print; return the exit code."""
    if files is not None:
        paths = [Path(f) for f in files]
        for path in paths:
            problem = _unreadable(path)
            if problem:
                _err(f"--why-log: cannot read {path}: {problem}")
                return EXIT_USAGE
        diagnoses = diagnose_files(paths)
    else:
        from tui.runs.index import RunNotFound, find_run
        from tui.runs.record import RunRecord, latest_run_id, runs_dir

        base = runs_dir()
        chosen = run_id or latest_run_id(base)
        if not chosen:
            _err(f"--why: no runs under {base}/ (set FTWIZ_RUNS_DIR or run from the directory that holds runs/)")
            return EXIT_USAGE
        try:  # a named run is found from anywhere (FTWIZ_RUNS_DIR, the per-user index, ./runs)
            run_dir = find_run(chosen)
            record = RunRecord.open(run_dir.parent, chosen).data
        except RunNotFound as exc:
            _err(f"--why: {exc}")
            return EXIT_USAGE
        diagnoses = diagnose_run(run_dir, record, kernel=_kernel(config_path))
    if json_output:
        print(json.dumps(as_json(diagnoses), indent=2))
    else:
        print(format_text(diagnoses))
    return EXIT_OK


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a log, or None; a FIFO, device or directory is refused without reading."""
    try:
        fd = open_regular(path)
    except NotARegularFile as exc:
        return f"{exc} (give the log file itself)"
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    return None


def _kernel(config_path: str | None) -> KernelLookup | None:
    """The agents' kernel lookup when a config loads; None (unconfirmed) otherwise."""
    from shared.config import ConfigError
    from tui.config_io import load_config

    from .kernel import agent_kernel_lookup

    try:
        loaded: Any = load_config(config_path)
    except ConfigError as exc:
        _err(f"warning: no config ({exc}); a SIGKILL cannot be checked against the nodes' kernel logs")
        return None
    return agent_kernel_lookup(loaded.config)
