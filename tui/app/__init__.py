"""The Textual wizard ``ftwiz`` opens when no action flag is given.

Four steps — Cluster, Job, Checklist, Launch — over the same engines as ``ftwiz --check`` and
``ftwiz --launch``. :func:`main` is the entry point the CLI calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from shared.config import FtwizConfig

__all__ = ["main"]


def main(config: FtwizConfig, config_path: Optional[str | Path] = None) -> int:
    """Run the wizard on ``config`` (read from ``config_path``; None for the embedded default).

    A ``local = true`` node gets an agent started here when none answers; it is stopped on exit if
    this call started it. Returns the process exit status.
    """
    from tui.app.app import FtwizApp
    from tui.local_agent import LocalAgent, LocalAgentError

    local = LocalAgent(config)
    try:
        local.start()
    except LocalAgentError as exc:
        # The wizard still opens: the node shows as down, with the client's reason and fix.
        print(f"ftwiz: {exc}", file=sys.stderr)
    try:
        result = FtwizApp(config, config_path).run()
    finally:
        local.stop()
    return int(result or 0)
