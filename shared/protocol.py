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

import json
import time
from typing import Any, Optional

__all__ = ["KINDS", "PREFIX_KEY", "format_line", "parse_line"]

PREFIX_KEY = "ftwiz"
KINDS = frozenset({"started", "heartbeat", "progress", "allreduce", "checkpoint", "note", "done", "error"})


def format_line(kind: str, **fields: Any) -> str:
    """One protocol line (no newline) of ``kind`` with ``fields``; ``time`` is added when absent."""
    if kind not in KINDS:
        raise ValueError(f"unknown protocol kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    record: dict[str, Any] = {PREFIX_KEY: kind}
    record.update(fields)
    record.setdefault("time", round(time.time(), 3))
    # allow_nan=False would raise on a NaN loss; a NaN is real information, so send it as null instead
    return json.dumps({k: _finite(v) for k, v in record.items()}, separators=(",", ":"))


def parse_line(line: str) -> Optional[dict[str, Any]]:
    """The protocol record in ``line``, or None for any other line.

    Tolerates a prefix before the JSON (torchrun's ``[default0]:``, a launcher's ``node1/r0 |``) and
    trailing whitespace. Returns the decoded dict, whose ``"ftwiz"`` value is the kind.
    """
    start = line.find('{"' + PREFIX_KEY + '"')
    if start < 0:
        return None
    try:
        record = json.loads(line[start:].strip())
    except (ValueError, RecursionError):  # RecursionError: a line of nested brackets, deeper than json can decode
        return None
    if not isinstance(record, dict) or not isinstance(record.get(PREFIX_KEY), str):
        return None
    return record


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
