"""The Textual wizard ``ftwiz`` opens when no action flag is given.

Four steps — Cluster, Job, Checklist, Launch — over the same engines as ``ftwiz --check`` and
``ftwiz --launch``. :func:`main` is the entry point the CLI calls (after it has started the local
agent of a ``local = true`` node, as it does for every mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from shared.config import FtwizConfig

__all__ = ["main"]


def main(config: FtwizConfig, config_path: Optional[str | Path] = None) -> int:
    """Run the wizard on ``config`` (read from ``config_path``; None for the embedded default).

    Returns the process exit status: 0 after a normal quit.
    """
    from tui.app.app import FtwizApp

    return int(FtwizApp(config, config_path).run() or 0)
