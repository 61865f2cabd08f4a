"""Fixes computed from the run: the job's own numbers, the interface the checklist resolved, the port."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .model import Diagnosis, ReadLine

__all__ = ["computed_fix"]

_PORT_RE = re.compile(r"(?:port:?\s*|\]:|\d, |\d:)(?P<port>\d{2,5})(?![:.\d])")
_DATA_PREP_RE = re.compile(r"tokeniz|Map|Running tokenizer|Generating train split|preprocess|Loading checkpoint shards", re.IGNORECASE)


def computed_fix(diag: Diagnosis, *, record: Mapping[str, Any] | None, lines: Sequence[ReadLine],
                 first_root: Diagnosis | None) -> str | None:
    """The fix with this run's numbers, or None to keep the generic one."""
    job = ((record or {}).get("config") or {}).get("job") or {}
    cluster = ((record or {}).get("config") or {}).get("cluster") or {}
    if diag.echo and first_root is not None:
        return (f"an echo of {first_root.cause} on {first_root.node or '?'}"
                + (f"/rank {first_root.rank}" if first_root.rank is not None else "") + f": fix that first ({first_root.fix})")
    if diag.cause == "oom.gpu" and job.get("micro_batch_size"):
        mbs, accum = int(job["micro_batch_size"]), int(job.get("grad_accum_steps") or 1)
        if mbs > 1:
            return (f"micro_batch_size {mbs} -> {max(1, mbs // 2)} with grad_accum_steps {accum} -> {accum * 2} "
                    f"(same global batch); then gradient checkpointing, then method = \"qlora\" (now {job.get('method')})")
        return (f"micro_batch_size is already 1: turn on gradient checkpointing, shorten seq_len ({job.get('seq_len')}), "
                f"or use method = \"qlora\" (now {job.get('method')}) or more GPUs (fsdp)")
    if diag.cause == "loss.nan" and job.get("learning_rate"):
        lr = float(job["learning_rate"])
        return f"learning_rate {lr:g} -> {lr / 10:g} (and keep max_grad_norm clipping on); with fp16 prefer bf16"
    if diag.cause == "net.interface":
        used = _env_value(record, diag.node, ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"))
        if used:
            return (f"[nccl] socket_ifname made {diag.node or 'the node'} use {used!r}; set it to \"auto\" (the checklist "
                    "resolves the interface in the master's subnet on each node) or to a name `ip -br addr` shows on every node")
    if diag.cause in ("port.in_use", "rendezvous"):
        port = cluster.get("rendezvous_port") or _port(diag)
        master = cluster.get("master") or "the master"
        if port and diag.cause == "port.in_use":
            return (f"port {port} is taken on {diag.node or master}: `ss -ltnp 'sport = :{port}'` names the holder; "
                    f"stop it or set [cluster] rendezvous_port to a free port")
        if port:
            return (f"open TCP port {port} on {master} to every node (`nft list ruleset`, `ufw allow {port}/tcp`); "
                    "`ftwiz --check` tests it with a listener (a check you forced past is the likely culprit)")
    if diag.cause == "code.error" and diag.detail:
        return f"fix the training code: {diag.detail} (rank {diag.rank} on {diag.node or '?'} raised it first)"
    if diag.cause == "nccl.timeout":
        return _timeout_fix(lines)
    return None


def _port(diag: Diagnosis) -> str | None:
    for item in diag.evidence:
        match = _PORT_RE.search(item.text)
        if match:
            return match.group("port")
    return None


def _env_value(record: Mapping[str, Any] | None, node: str | None, names: Sequence[str]) -> str | None:
    nodes = (record or {}).get("nodes") or {}
    for name, info in nodes.items():
        if node is not None and name != node:
            continue
        env = (info or {}).get("env") or {}
        for key in names:
            if env.get(key):
                return str(env[key])
    return None


def _timeout_fix(lines: Sequence[ReadLine]) -> str:
    """Was rank 0 busy with something else (data preparation) while the others waited?"""
    rank0 = [line for line in lines if line.rank == 0 and line.text.strip()]
    busy = [line for line in rank0[-50:] if _DATA_PREP_RE.search(line.text)]
    if busy:
        return ("rank 0 was still preparing data when the others timed out (last: "
                f"{busy[-1].file}:{busy[-1].line}): preprocess the dataset before launching, or raise the timeout "
                "(ddp_timeout / init_process_group(timeout=...)) above the 30 min default")
    return ("no rank was busy elsewhere in the logs: a peer stopped taking part (died, hung or lost its link); "
            "check the other diagnoses and the stall's stack dumps")
