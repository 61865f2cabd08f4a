"""The Slurm backend's entry points for ``tui/cli.py``: ``--export-sbatch`` and ``--check`` on an allocation."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from shared.config import FtwizConfig

__all__ = ["export_sbatch"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def export_sbatch(config: FtwizConfig, path: str, *, stderr: TextIO = sys.stderr) -> int:
    """Write the sbatch script of the configured job to ``path`` (``-`` for stdout); returns the exit code.

    The run directory is created under ``[slurm] workdir`` (resolved here: it must be the same path on every
    node, a shared filesystem), so the script's ``#SBATCH --output`` can be written there.
    """
    from tui.launch.record import new_run_id
    from tui.launch.support import workload_files
    from tui.slurm.export import ExportError, export_script

    run_id = new_run_id()
    workdir_abs = os.path.abspath(os.path.expanduser(config.slurm.workdir))
    try:
        script = export_script(config, run_id, workdir_abs=workdir_abs, workloads=workload_files())
    except (ExportError, RuntimeError) as exc:
        print(f"ftwiz: cannot export the sbatch script: {exc}", file=stderr)
        return EXIT_USAGE
    rundir = Path(workdir_abs) / "runs" / run_id
    try:
        rundir.mkdir(parents=True, exist_ok=True)
        if path == "-":
            sys.stdout.write(script)
        else:
            target = Path(path)
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            tmp.write_text(script)
            tmp.chmod(0o755)
            os.replace(tmp, target)
    except OSError as exc:
        print(f"ftwiz: cannot write {exc.filename or path}: {exc.strerror or exc}", file=stderr)
        return EXIT_FAILED
    where = "stdout" if path == "-" else path
    print(f"ftwiz: wrote the sbatch script of run {run_id} to {where}; submit it with `sbatch {where}` "
          f"(logs in {rundir})", file=stderr)
    return EXIT_OK


