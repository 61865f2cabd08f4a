"""The controller-side run record: ``runs/<run id>/run.json`` and ``runs/<run id>/<node>.log``.

``run.json`` has a schema, :class:`RunRecordModel` (pydantic, with the :class:`RunStatus` enum),
and is rewritten atomically (temp file in the same directory, fsync, rename) at every state change,
so it is complete whatever stops the controller. :meth:`RunRecord.create` starts a new record and
saves it (and adds it to the per-user index, :mod:`tui.runs.index`); :meth:`RunRecord.open` reads a
stored one through the model and never writes it (a failed ``--attach`` leaves the record exactly as it was;
a run with no record is refused, never given one). The runs directory is ``./runs`` unless
``FTWIZ_RUNS_DIR`` says otherwise.

A run's directory is 0700 and its files 0600: the logs are the job's output, and ``run.json`` keeps
``[job].env`` / ``[nccl].env`` with the values of secret-looking keys masked (:mod:`shared.redact`).
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

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.redact import masked_config, masked_env
from shared.slurmjob import valid_job_id
from tui.runs.status import NEVER_RAN, RunStatus

__all__ = ["NodeRecord", "RunRecord", "RunRecordModel", "latest_run_id", "load_record", "new_run_id", "runs_dir"]


def runs_dir(override: Optional[os.PathLike[str] | str] = None) -> Path:
    """Where run records live: ``override``, else ``$FTWIZ_RUNS_DIR``, else ``./runs``."""
    return Path(override or os.environ.get("FTWIZ_RUNS_DIR") or "runs")


def new_run_id() -> str:
    """A sortable, unique run id, e.g. ``20250101-120000-3fa2``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime()) + "-" + secrets.token_hex(2)


class NodeRecord(BaseModel):
    """``run.json``'s ``nodes[<node>]``: what ran there and how it ended."""

    model_config = ConfigDict(extra="allow")

    host: Optional[str] = None
    state: Optional[str] = None
    workdir: Optional[str] = None
    rundir: Optional[str] = None
    nproc: Optional[int] = None
    command: Optional[list[str]] = None
    command_line: Optional[str] = None
    env: Optional[dict[str, str]] = None
    cuda_visible_devices: Optional[str] = None
    node_log: Optional[str] = None
    pgid: Optional[int] = None
    """torchrun's process group on the node (its ``sh <node>.sh`` leader's pid)."""
    pgid_start: Optional[int] = None
    """The group leader's start time (``/proc/PID/stat`` field 22, clock ticks after boot): a stop signals the
    group only while the process leading it has this start time (group ids are reused); None: never as a group."""
    exit: Optional[str] = None
    exit_description: Optional[str] = None
    ended_at: Optional[float] = None
    killed: Optional[list[dict[str, Any]]] = None
    remaining: Optional[list[int]] = None
    reaped_at: Optional[float] = None


class RunRecordModel(BaseModel):
    """``run.json``. Unknown keys are kept (a newer ftwiz may have written them)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    run_id: str
    created_at: float = Field(default_factory=time.time)
    """Unix time the record was created; 0 for a run this machine never launched (never "the latest")."""
    status: RunStatus = RunStatus.STARTING
    cluster: Optional[str] = None
    config: Optional[dict[str, Any]] = None
    config_source: Optional[str] = None
    resume: bool = False
    resumed_from: Optional[str] = None
    output_dir: Optional[str] = None
    nodes: dict[str, NodeRecord] = Field(default_factory=dict)
    notes: list[dict[str, Any]] = Field(default_factory=list)
    launched_at: Optional[float] = None
    started_at: Optional[float] = None
    attached_at: Optional[float] = None
    fanout_s: Optional[float] = None
    prepare_s: Optional[float] = None
    stop_reason: Optional[str] = None
    stop_requested_at: Optional[float] = None
    stopped_reachable_s: Optional[float] = None
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    failed: Optional[dict[str, Any]] = None
    leftovers: dict[str, list[int]] = Field(default_factory=dict)
    unreaped: list[str] = Field(default_factory=list)
    ended_at: Optional[float] = None
    detached_at: Optional[float] = None
    world_size: Optional[int] = None
    ranks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    progress: Optional[dict[str, Any]] = None
    root_causes: list[dict[str, Any]] = Field(default_factory=list)
    stalled_ranks: Optional[list[int]] = None
    stack_dumps_from: Optional[list[int]] = None
    stack_dump_silent: Optional[list[int]] = None
    """Ranks sent SIGUSR1 that printed no faulthandler dump (stopped, or hung outside Python)."""
    stack_dumps_py_spy: Optional[list[int]] = None
    """Ranks whose stack py-spy read from outside (installed beside the node's training interpreter)."""
    hang: Optional[dict[str, Any]] = None
    """A hang or stall: before the first step or not, the suspect ranks, each rank's last process state."""
    checklist: list[dict[str, Any]] = Field(default_factory=list)
    """The checklist rows the launch followed (a warning or a fail forced past with --force is here)."""
    sync_forecast: Optional[dict[str, Any]] = None
    """The checklist's gradient-sync forecast (``shared.syncplan.SyncForecast``); ``progress.sync_s`` is what the run measured."""
    balance: Optional[dict[str, Any]] = None
    """``[job] balance = "auto"``: ``{"mode", "ranks": [{"rank", "node", "samples_per_step", "micro_batch", "accum"}]}``,
    the shares the run last fixed (after calibration, again after a drift). Your own code (``workload = "command"``):
    ``{"mode", "global_batch", "why", "ranks": [{"rank", "node", "local_rank", ...}]}``, planned before launch, each
    ``rank`` named when that rank starts (the ``FTWIZ_*`` numbers it read)."""
    throughput: Optional[dict[str, Any]] = None
    """``{"tokens_per_s", "steps"}``: every rank's tokens over the time since the end of the first step (balanced runs)."""
    straggler: Optional[dict[str, Any]] = None
    """The rank that sets the pace, ``{"node", "rank", "slowdown", "why"}`` (``shared.straggler``); null when no
    rank is 1.3x slower than the median of the others (or the workload reports no per-rank timings)."""
    diagnoses: list[dict[str, Any]] = Field(default_factory=list)
    """The failure doctor's findings, most likely root cause first (``ftwiz --why``)."""
    slurm: Optional[dict[str, Any]] = None
    """The Slurm job the run lives in (backend = "slurm"): job_id, nodes, state_dir, keeper, keep_allocation,
    and ``ended`` when Slurm ended it (state, reason, what it means, the fix)."""
    versions: dict[str, Any] = Field(default_factory=dict)
    """Per node, the software versions the agents last reported (the doctor's evidence for version skew)."""

    @field_validator("slurm")
    @classmethod
    def _slurm_job_id(cls, value: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        # The job id goes to squeue, scontrol and scancel: a record saying "--me" would cancel every job of the user.
        if value is not None and "job_id" in value and not valid_job_id(str(value["job_id"])):
            raise ValueError(f"slurm.job_id {value['job_id']!r} is not a Slurm job id (digits, or <job>_<task>)")
        return value


def latest_run_id(base: Path) -> Optional[str]:
    """The most recently created run under ``base`` that got as far as starting, or None."""
    best: tuple[float, str] | None = None
    if not base.is_dir():
        return None
    for child in base.iterdir():
        if not (child / "run.json").is_file():
            continue
        try:  # through the schema: a record that does not validate is never "the latest run"
            model = RunRecordModel.model_validate({"run_id": child.name, **load_record(base, child.name)})
        except (OSError, ValueError, RecursionError):
            continue
        started = model.created_at
        if model.status in NEVER_RAN or model.run_id != child.name:
            continue
        if best is None or (started, child.name) > best:
            best = (started, child.name)
    return best[1] if best else None


def _first_line(exc: Exception) -> str:
    """A validation error as ``field: message`` (the first three), anything else as its first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the record'}: {e['msg']}" for e in errors()[:3])
    return str(exc).split("\n")[0]


def load_record(base: Path, run_id: str) -> dict[str, Any]:
    """The stored ``run.json`` of ``run_id`` as a dict (FileNotFoundError when there is none)."""
    data = json.loads((base / run_id / "run.json").read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{base / run_id / 'run.json'}: not a JSON object")
    return data


class RunRecord:
    """``run.json`` plus the per-node log files of one run; safe to use from several threads."""

    def __init__(self, base: Path, model: RunRecordModel) -> None:
        self.dir = base / model.run_id
        self.path = self.dir / "run.json"
        self.model = model
        self._lock = threading.RLock()
        self._logs: dict[str, TextIO] = {}
        #: Why the run could not be added to the per-user index (None: it was, or the record was opened).
        self.index_problem: Optional[str] = None

    @classmethod
    def create(cls, base: Path, run_id: str, **fields: Any) -> "RunRecord":
        """A new record for ``run_id``, saved at once and added to the per-user index (:mod:`tui.runs.index`)."""
        from tui.runs.index import remember

        record = cls(base, RunRecordModel(run_id=run_id, **fields))
        record.save()
        record.index_problem = remember(run_id, record.dir)
        return record

    @classmethod
    def open(cls, base: Path, run_id: str) -> "RunRecord":
        """The stored record of ``run_id``, read through :class:`RunRecordModel`. Never writes.

        Raises :class:`tui.runs.index.RunNotFound` when there is no record or it does not read as one:
        a run that was not found never gets a record (a stop or attach must not invent one).
        """
        from tui.runs.index import RunNotFound

        path = base / run_id / "run.json"
        try:
            model = RunRecordModel.model_validate(load_record(base, run_id))
        except OSError as exc:
            raise RunNotFound(run_id, [str(path)], f"no record of run {run_id!r}: {path}: {exc.strerror or exc}") from None
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError; nesting too deep for json
            raise RunNotFound(run_id, [str(path)], f"{path} is not a valid run record: {_first_line(exc)}") from None
        if model.run_id != run_id:
            raise RunNotFound(run_id, [str(path)], f"{path} is the record of run {model.run_id!r}, not {run_id!r}")
        return cls(base, model)

    @property
    def data(self) -> dict[str, Any]:
        """The record as JSON-ready data (a copy: change it through :meth:`update`)."""
        with self._lock:
            return self.model.model_dump(mode="json")

    def node(self, name: str) -> NodeRecord:
        """``nodes[name]`` (created empty when missing)."""
        with self._lock:
            if name not in self.model.nodes:
                self.model.nodes = {**self.model.nodes, name: NodeRecord()}
            return self.model.nodes[name]

    def update(self, *, save: bool = True, **fields: Any) -> None:
        """Set top-level fields (validated) and save."""
        with self._lock:
            for key, value in fields.items():
                setattr(self.model, key, value)
            if save:
                self.save()

    def update_node(self, node: str, *, save: bool = True, **fields: Any) -> None:
        """Set fields of ``nodes[node]`` and save."""
        with self._lock:
            merged = self.node(node).model_dump()
            merged.update(fields)
            self.model.nodes = {**self.model.nodes, node: NodeRecord.model_validate(merged)}
            if save:
                self.save()

    def note(self, text: str, level: str, *, at: Optional[float] = None) -> None:
        """Keep an operator note (saved with the next save)."""
        with self._lock:
            self.model.notes.append({"time": time.time() if at is None else at, "level": level, "text": text})

    def save(self) -> None:
        """Write ``run.json`` atomically (mode 0600; secret-looking env values masked)."""
        with self._lock:
            self._make_dir()
            text = json.dumps(_masked(self.model.model_dump(mode="json")), indent=2, sort_keys=True, default=str)
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

    def reset_log(self, node: str) -> None:
        """Start ``<node>.log`` afresh (a re-attach replays the node's whole log)."""
        with self._lock:
            fh = self._logs.pop(node, None)
            if fh is not None:
                fh.close()
            self._make_dir()
            os.close(os.open(self.dir / f"{node}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))

    def log(self, node: str, line: str) -> None:
        """Append one line to ``<node>.log`` (line-buffered, so a killed controller loses nothing)."""
        with self._lock:
            fh = self._logs.get(node)
            if fh is None:
                self._make_dir()
                fd = os.open(self.dir / f"{node}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                fh = self._logs[node] = open(fd, "a", buffering=1, encoding="utf-8")
            fh.write(line + "\n")

    def _make_dir(self) -> None:
        """The run directory, the user's alone (0700, also when an older ftwiz made it 0755)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.dir.stat().st_mode & 0o077:
            self.dir.chmod(0o700)

    def close(self) -> None:
        """Close the log files."""
        with self._lock:
            for fh in self._logs.values():
                fh.close()
            self._logs.clear()


def _masked(data: dict[str, Any]) -> dict[str, Any]:
    """``run.json``'s data with ``config``'s ``[job]``/``[nccl]`` env and each node's ``env`` masked (:mod:`shared.redact`)."""
    data["config"] = masked_config(data.get("config"))
    for node in (data.get("nodes") or {}).values():
        if isinstance(node, dict) and isinstance(node.get("env"), dict):
            node["env"] = masked_env(node["env"])
    return data
