"""The controller-side run record: ``runs/<run id>/run.json`` and ``runs/<run id>/<node>.log``.

``run.json`` is rewritten atomically (temp file in the same directory, fsync, rename) at every
state change, so it is complete whatever stops the controller. The runs directory is ``./runs``
unless ``FTWIZ_RUNS_DIR`` says otherwise.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, TextIO

__all__ = ["RunRecord", "latest_run_id", "new_run_id", "runs_dir", "load_record"]


def runs_dir(override: Optional[os.PathLike[str] | str] = None) -> Path:
    """Where run records live: ``override``, else ``$FTWIZ_RUNS_DIR``, else ``./runs``."""
    return Path(override or os.environ.get("FTWIZ_RUNS_DIR") or "runs")


def new_run_id() -> str:
    """A sortable, unique run id, e.g. ``20250101-120000-3fa2``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime()) + "-" + secrets.token_hex(2)


#: Records that never ran anything: not "the last run" for --resume or --attach.
NEVER_RAN = ("cancelled", "launch_failed")


def latest_run_id(base: Path) -> Optional[str]:
    """The most recently created run under ``base`` that got as far as starting, or None."""
    best: tuple[float, str] | None = None
    if not base.is_dir():
        return None
    for child in base.iterdir():
        record = child / "run.json"
        if not record.is_file():
            continue
        try:
            data = json.loads(record.read_text())
            started = float(data.get("created_at") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        if data.get("status") in NEVER_RAN:
            continue
        if best is None or (started, child.name) > best:
            best = (started, child.name)
    return best[1] if best else None


def load_record(base: Path, run_id: str) -> dict[str, Any]:
    """The stored ``run.json`` of ``run_id`` (FileNotFoundError when there is none)."""
    return json.loads((base / run_id / "run.json").read_text())


class RunRecord:
    """``run.json`` plus the per-node log files of one run; safe to use from several threads."""

    def __init__(self, base: Path, run_id: str, data: Optional[dict[str, Any]] = None) -> None:
        self.dir = base / run_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "run.json"
        self.data: dict[str, Any] = data if data is not None else {"run_id": run_id, "created_at": time.time()}
        self._lock = threading.RLock()
        self._logs: dict[str, TextIO] = {}

    def update(self, **fields: Any) -> None:
        """Set top-level fields and save."""
        with self._lock:
            self.data.update(fields)
            self.save()

    def update_node(self, node: str, **fields: Any) -> None:
        """Set fields of ``nodes[node]`` and save."""
        with self._lock:
            self.data.setdefault("nodes", {}).setdefault(node, {}).update(fields)
            self.save()

    def save(self) -> None:
        """Write ``run.json`` atomically."""
        with self._lock:
            text = json.dumps(self.data, indent=2, sort_keys=True, default=str)
            fd, tmp = tempfile.mkstemp(prefix=".run.json.", dir=self.dir)
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def log(self, node: str, line: str) -> None:
        """Append one line to ``<node>.log`` (line-buffered, so a killed controller loses nothing)."""
        with self._lock:
            fh = self._logs.get(node)
            if fh is None:
                fh = self._logs[node] = open(self.dir / f"{node}.log", "a", buffering=1, encoding="utf-8")
            fh.write(line + "\n")

    def close(self) -> None:
        """Close the log files."""
        with self._lock:
            for fh in self._logs.values():
                fh.close()
            self._logs.clear()
