"""The line protocol between the workloads and the controller.

Every machine-readable line a workload prints is ONE JSON object on its own stdout line, with the key
``"ftwiz"`` naming its kind. Everything else on stdout/stderr is for humans (tables, notes, torchrun's own
output) and is ignored by :func:`parse_line`. Lines are flushed as they are written, each in one write, so
lines from the ranks of one node do not interleave inside a line.

Kinds and their fields (``time`` is Unix seconds, float):

``started``     every rank, once, after the process group is up::

    {"ftwiz": "started", "rank": 0, "local_rank": 0, "world_size": 4, "local_world_size": 2,
     "hostname": "node1", "backend": "nccl", "pid": 1234, "workload": "sft", "time": 1.7e9}

``heartbeat``   every rank, every optimizer step (sft) or size (allreduce), so a stall can name the ranks
                that did not move::

    {"ftwiz": "heartbeat", "rank": 3, "step": 12, "time": 1.7e9}

                the built-in ``sft`` (DDP) adds this rank's timing of the step: ``"compute_s"`` (everything but
                the gradient sync) and ``"sync_s"`` (its own time in the all-reduce, waiting for slower peers
                included); the controller names the straggler from them (``shared/straggler.py``)

``progress``    global rank 0 only, every ``logging_steps``::

    {"ftwiz": "progress", "rank": 0, "step": 12, "total_steps": 100, "loss": 2.31,
     "learning_rate": 0.0002, "tokens_per_s": 5120.0, "epoch": 0.4, "time": 1.7e9}

                with ``"sync_s": 0.71`` when the ranks synchronise gradients (DDP): per optimizer step,
                the least time any rank spent in the gradient all-reduce, mean since the last progress
                line (``agent/workloads/synctime.py``)

``allreduce``   global rank 0 only, one per message size (units as nccl-tests: GB/s = 1e9 bytes/s,
                algbw = size_bytes / time, busbw = algbw * 2 (n - 1) / n, time is the mean over ranks of
                the per-iteration time)::

    {"ftwiz": "allreduce", "rank": 0, "size_bytes": 1048576, "world_size": 2, "iterations": 20,
     "time_us": 812.5, "algbw_gbps": 1.29, "busbw_gbps": 1.29, "correct": true}

``checkpoint``  global rank 0, after a checkpoint is complete on disk::

    {"ftwiz": "checkpoint", "rank": 0, "step": 100, "path": "/work/ckpt/checkpoint-100"}

``note``        any rank; a decision the user should know of (fallbacks such as fp32 on CPU)::

    {"ftwiz": "note", "rank": 0, "message": "no CUDA GPU: training in fp32 (precision = \\"bf16\\" ignored)"}

``done``        every rank, at a clean end (``adapter_path`` on rank 0 of an sft run: the adapter, or the
                full model for ``method = "full"``)::

    {"ftwiz": "done", "rank": 0, "status": "ok", "adapter_path": "/work/ckpt/final"}

                On CUDA every rank's ``done`` also carries ``peak_allocated_bytes`` (``torch.cuda.max_memory_allocated``).

``error``       any rank, before a non-zero exit; ``message`` says what failed and the fix::

    {"ftwiz": "error", "rank": 1, "message": "data/train.jsonl line 7: not valid JSON (...)"}

**Typed records.** :func:`parse_line` reads a line into one frozen dataclass per kind (:class:`Started`,
:class:`Heartbeat`, :class:`Progress`, :class:`Allreduce`, :class:`Checkpoint`, :class:`Note`, :class:`Done`,
:class:`Error`; :data:`RECORDS` maps each kind to its class) and :func:`format_line` writes one. Every field is
optional: a line from your own code says what it knows. A field of the wrong type (``"step": "12"``, a ``NaN`` sent
as ``null``) reads as absent, a key no record knows is ignored, and an unknown kind is no record at all (None):
a malformed line is never worth a crash of the controller.

Exit codes: 0 ok; 2 bad input (spec, dataset, model, method/hardware mismatch); 3 all-reduce verification
failed; 1 anything unexpected (a traceback follows on stderr).

**From your own code, without importing anything**: print one JSON object per line to stdout, flushed,
with ``"ftwiz"`` first, e.g. ``print(json.dumps({"ftwiz": "progress", "step": 12, "total_steps": 100,
"loss": 2.31}), flush=True)``. Only ``ftwiz`` and the fields you know are needed; ``rank`` defaults to
the torchrun rank prefix of the line.

Pure (no I/O, no torch, standard library only): the controller parses with it, and the launcher ships this file
beside the workloads under the same name (``tui.launch.support.SHIPPED_SHARED``), which add ``emit`` on top.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Union

__all__ = [
    "KINDS", "PREFIX_KEY", "RECORDS", "Record",
    "Started", "Heartbeat", "Progress", "Allreduce", "Checkpoint", "Note", "Done", "Error",
    "format_line", "make_record", "parse_line",
]

PREFIX_KEY = "ftwiz"


@dataclass(frozen=True)
class Started:
    """``started``: a rank is up (every rank, once, after the process group is up)."""

    KIND: ClassVar[str] = "started"
    rank: Optional[int] = None
    local_rank: Optional[int] = None
    world_size: Optional[int] = None
    local_world_size: Optional[int] = None
    hostname: Optional[str] = None
    backend: Optional[str] = None
    """``nccl`` or ``gloo``; None for your own code (it picks its own)."""
    pid: Optional[int] = None
    workload: Optional[str] = None
    balance: Optional[dict] = None
    """Your own code's rank: its share of the global batch as it read it (``shared.balanceplan.env_for``)."""
    time: Optional[float] = None


@dataclass(frozen=True)
class Heartbeat:
    """``heartbeat``: a rank moved (every optimizer step, or every size of the all-reduce check)."""

    KIND: ClassVar[str] = "heartbeat"
    rank: Optional[int] = None
    step: Optional[int] = None
    compute_s: Optional[float] = None
    """This rank's step time without the gradient sync (the built-in recipes)."""
    sync_s: Optional[float] = None
    """This rank's own time in the gradient all-reduce, waiting for slower peers included."""
    time: Optional[float] = None


@dataclass(frozen=True)
class Progress:
    """``progress``: where training stands (global rank 0, every ``logging_steps``).

    The last six fields come from what common trainers print (``tui/launch/trainer_output.py`` reads their lines
    into this record), never from the workloads."""

    KIND: ClassVar[str] = "progress"
    rank: Optional[int] = None
    step: Optional[int] = None
    total_steps: Optional[int] = None
    loss: Optional[float] = None
    learning_rate: Optional[float] = None
    tokens_per_s: Optional[float] = None
    epoch: Optional[float] = None
    sync_s: Optional[float] = None
    """The least time any rank spent in the gradient all-reduce per step, mean since the last progress line."""
    time: Optional[float] = None
    source: Optional[str] = None
    """Which trainer output it was read from (``log_dict``, ``tqdm``, ``llamafactory``, ``progress_regex``)."""
    eta_s: Optional[float] = None
    elapsed_s: Optional[float] = None
    num_tokens: Optional[float] = None
    """TRL's cumulative token count over every rank."""
    tokens_per_s_per_gpu: Optional[float] = None
    grad_norm: Optional[float] = None


@dataclass(frozen=True)
class Allreduce:
    """``allreduce``: one message size of the all-reduce check (global rank 0)."""

    KIND: ClassVar[str] = "allreduce"
    rank: Optional[int] = None
    size_bytes: Optional[int] = None
    world_size: Optional[int] = None
    iterations: Optional[int] = None
    time_us: Optional[float] = None
    algbw_gbps: Optional[float] = None
    busbw_gbps: Optional[float] = None
    correct: Optional[bool] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class Checkpoint:
    """``checkpoint``: a checkpoint is complete on disk (global rank 0)."""

    KIND: ClassVar[str] = "checkpoint"
    rank: Optional[int] = None
    step: Optional[int] = None
    path: Optional[str] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class Note:
    """``note``: a decision the user should know of (any rank); some carry figures beside the message."""

    KIND: ClassVar[str] = "note"
    rank: Optional[int] = None
    message: Optional[str] = None
    balance: Optional[dict] = None
    """``balance = "auto"``: the planned shares (``{"mode", "ranks": [...]}``), for ``run.json``."""
    shard_params: Optional[int] = None
    """FSDP: this rank's shard (parameters, bytes, trainable), the whole model's, the units and the world size."""
    shard_bytes: Optional[int] = None
    total_params: Optional[int] = None
    total_bytes: Optional[int] = None
    shard_trainable: Optional[int] = None
    fsdp_units: Optional[int] = None
    world_size: Optional[int] = None
    probe_logits: Optional[list] = None
    """FSDP: the trained model's logits on a fixed probe (the tests compare them across resumes)."""
    time: Optional[float] = None


@dataclass(frozen=True)
class Done:
    """``done``: a rank ended cleanly."""

    KIND: ClassVar[str] = "done"
    rank: Optional[int] = None
    status: Optional[str] = None
    adapter_path: Optional[str] = None
    """Rank 0 of a fine-tune: the adapter, or the full model for ``method = "full"``."""
    step: Optional[int] = None
    peak_allocated_bytes: Optional[int] = None
    """On CUDA: ``torch.cuda.max_memory_allocated``."""
    throughput: Optional[dict] = None
    """``balance = "auto"``: ``{"tokens_per_s", "steps"}`` since the first step, for ``run.json``."""
    time: Optional[float] = None


@dataclass(frozen=True)
class Error:
    """``error``: what failed and the fix (any rank, before a non-zero exit)."""

    KIND: ClassVar[str] = "error"
    rank: Optional[int] = None
    message: Optional[str] = None
    time: Optional[float] = None


Record = Union[Started, Heartbeat, Progress, Allreduce, Checkpoint, Note, Done, Error]
"""Any protocol record."""
RECORDS: dict[str, type] = {cls.KIND: cls for cls in (Started, Heartbeat, Progress, Allreduce, Checkpoint, Note, Done, Error)}
"""Each kind's record class."""
KINDS = frozenset(RECORDS)


def make_record(kind: str, **fields: Any) -> Record:
    """The record of ``kind`` with ``fields`` (what :func:`agent.workloads.protocol.emit` writes); a kind or a field
    the protocol does not know is a ValueError naming it."""
    cls = RECORDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown protocol kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    unknown = sorted(set(fields) - {f.name for f in _FIELDS[cls]})
    if unknown:
        raise ValueError(f"protocol kind {kind!r} has no field {', '.join(unknown)}; its fields: "
                         f"{', '.join(f.name for f in _FIELDS[cls])}")
    return cls(**fields)


def format_line(record: Record) -> str:
    """One protocol line (no newline) of ``record``: its kind, then the fields it has; ``time`` is added when absent."""
    out: dict[str, Any] = {PREFIX_KEY: record.KIND}
    for f in _FIELDS[type(record)]:
        value = _finite(getattr(record, f.name))
        if value is not None:
            out[f.name] = value
    out.setdefault("time", round(time.time(), 3))
    # allow_nan=False would raise on a NaN loss; a NaN is real information, so it goes as absent (null) instead
    return json.dumps(out, separators=(",", ":"))


def parse_line(line: str) -> Optional[Record]:
    """The protocol record in ``line``, or None for any other line (and for a kind the protocol does not know).

    Tolerates a prefix before the JSON (torchrun's ``[default0]:``, a launcher's ``node1/r0 |``) and
    trailing whitespace. A field of the wrong type reads as absent; keys no record knows are ignored.
    """
    start = line.find('{"' + PREFIX_KEY + '"')
    if start < 0:
        return None
    try:
        obj = json.loads(line[start:].strip())
    except (ValueError, RecursionError):  # RecursionError: a line of nested brackets, deeper than json can decode
        return None
    if not isinstance(obj, dict):
        return None
    cls = RECORDS.get(obj.get(PREFIX_KEY))  # type: ignore[arg-type]
    if cls is None:
        return None
    return cls(**{f.name: _READERS[str(f.type)](obj[f.name]) for f in _FIELDS[cls] if f.name in obj})


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def _float(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _of(kind: type) -> Callable[[Any], Any]:
    return lambda value: value if isinstance(value, kind) else None


#: How a field of each declared type is read from JSON: the value, or None when it is of another type.
_READERS: dict[str, Callable[[Any], Any]] = {
    "Optional[int]": _int, "Optional[float]": _float, "Optional[str]": _of(str), "Optional[bool]": _of(bool),
    "Optional[dict]": _of(dict), "Optional[list]": _of(list),
}
_FIELDS = {cls: dataclasses.fields(cls) for cls in RECORDS.values()}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
