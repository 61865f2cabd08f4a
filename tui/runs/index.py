"""Where a run's record is: a per-user index of run ids → record directories, so ``ftwiz --stop``,
``--attach`` and ``--why RUN_ID`` find a run from any directory instead of guessing.

The index is ``<state dir>/runs.json`` (``$XDG_STATE_HOME/ftwiz``, else ``~/.local/state/ftwiz``), one JSON
object ``{"<run id>": "<absolute record directory>"}``. :func:`remember` adds a run as its record is created
(under a lock, rewritten atomically, entries whose record is gone dropped). :func:`find_run` tries, in
order, the runs directory named for this call (``FTWIZ_RUNS_DIR``, or the caller's), the index, and
``./runs``; a miss raises :class:`RunNotFound`, which names every place it looked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from shared.nodewire import RUN_ID_PATTERN

__all__ = ["RUN_ID_RE", "RunNotFound", "find_run", "index_path", "remember", "state_dir"]

INDEX_NAME = "runs.json"
#: What a run id may look like: it appears in paths, argv and environment, so keep it boring.
RUN_ID_RE = re.compile(RUN_ID_PATTERN)  # one rule, shared with the node helper and the reapers (shared.nodewire)


class RunNotFound(LookupError):
    """No record of a run id; ``places`` are where it was looked for (the message names them)."""

    def __init__(self, run_id: str, places: list[str], why: str = "") -> None:
        self.run_id, self.places = run_id, places
        where = "; ".join(places) if places else "nowhere"
        super().__init__(why or f"no record of run {run_id!r}: looked in {where}")


def state_dir() -> Path:
    """ftwiz's per-user state directory: ``$XDG_STATE_HOME/ftwiz``, else ``~/.local/state/ftwiz``."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"  # the XDG spec ignores a relative value
    return root / "ftwiz"


def index_path() -> Path:
    """The index file: ``<state dir>/runs.json``."""
    return state_dir() / INDEX_NAME


def remember(run_id: str, record_dir: Path) -> Optional[str]:
    """Add ``run_id`` → ``record_dir`` (made absolute) to the index; returns a problem to show, or None.

    A state directory that cannot be written never stops a launch: the run is then found only from the
    directory it was started in (the returned text says so).
    """
    path = index_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _locked(path):
            entries = {k: v for k, v in _read(path).items() if (Path(v) / "run.json").is_file()}
            entries[run_id] = str(Path(record_dir).resolve())
            _write(path, entries)
    except OSError as exc:
        return f"could not add run {run_id} to {path} ({exc.strerror or exc}): `ftwiz --stop/--attach {run_id}` finds it only from {Path.cwd()}"
    return None


def find_run(run_id: str, runs_dir: Optional[os.PathLike[str] | str] = None) -> Path:
    """The directory holding ``run.json`` of ``run_id``; raises :class:`RunNotFound` naming where it looked.

    Order: ``runs_dir`` (else ``$FTWIZ_RUNS_DIR``), the per-user index, then ``./runs``.
    """
    if not RUN_ID_RE.fullmatch(run_id or ""):
        raise RunNotFound(run_id, [], f"{run_id!r} is not a run id (they look like 20250101-120000-3fa2 and match {RUN_ID_RE.pattern})")
    places: list[str] = []
    explicit = runs_dir or os.environ.get("FTWIZ_RUNS_DIR")
    candidates: list[tuple[str, Path]] = []
    if explicit:
        candidates.append((f"{Path(explicit) / run_id}/ (the runs directory{'' if runs_dir else ' FTWIZ_RUNS_DIR names'})", Path(explicit) / run_id))
    index = index_path()
    indexed = _read(index).get(run_id)
    if indexed is not None:
        candidates.append((f"{indexed}/ (from the index {index})", Path(indexed)))
    else:
        places.append(f"the index {index} (no entry)")
    local = Path("runs").resolve() / run_id
    candidates.append((f"{local}/ (./runs of the current directory)", local))
    for label, candidate in candidates:
        if (candidate / "run.json").is_file() and candidate.name == run_id:
            return candidate
        places.append(label)
    raise RunNotFound(run_id, places)


def _read(path: Path) -> dict[str, str]:
    """The index as ``{run id: directory}``; a missing or damaged file reads as empty (it is only a cache of where runs are)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and RUN_ID_RE.fullmatch(k) and os.path.isabs(v)}


def _write(path: Path, entries: dict[str, str]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{INDEX_NAME}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entries, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise writers (two launches at once must not drop each other's entry)."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
