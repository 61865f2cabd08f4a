"""Sharded checkpoints of an FSDP run with ``torch.distributed.checkpoint`` on nodes that share no disk.

Layout of ``output_dir/checkpoint-N`` (the same name the DDP path uses, so :func:`checkpoint_steps` and the
launcher's ``checkpoint`` lines apply unchanged):

- ``__R_0.distcp``       rank R's shard of the model and optimizer states (written by DCP on rank R's node);
- ``.metadata``          DCP's index of every shard, written by rank 0 and copied here to every node;
- ``trainer_state.json`` the step, learning-rate schedule and world size; written on every node last, so
  its presence marks the checkpoint complete there.

Nodes keep only what their own ranks wrote. With c10d rendezvous the node ranks follow arrival order, so a
resumed run can put rank R on a node that never held ``__R_0.distcp`` (and DCP saves each replicated value once,
in one rank's file, so every rank reads a few files of others). Before loading, :func:`make_reachable` sends each
file a rank's load plan reads but its node lacks from a rank that has it (one broadcast per missing file), so a
resume works whatever the rank→node mapping, without a shared filesystem and without pinning ranks to nodes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .errors import WorkloadError

METADATA = ".metadata"
STATE = "trainer_state.json"
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_steps(output_dir: Path) -> list[int]:
    """Steps of the complete ``checkpoint-N`` dirs in ``output_dir`` (those with trainer_state.json), ascending.

    The HF Trainer (DDP) and :func:`save` (FSDP) both write ``trainer_state.json`` last, so its presence marks
    a checkpoint complete on this node whichever path wrote it.
    """
    if not output_dir.is_dir():
        return []
    steps = []
    for child in output_dir.iterdir():
        match = CHECKPOINT_DIR.fullmatch(child.name)
        if match and (child / STATE).is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def save(model, optimizer, directory: Path, state: dict[str, Any], *, rank: int) -> None:
    """Write a sharded checkpoint of ``model``/``optimizer`` to ``directory`` on every rank's node."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    directory.mkdir(parents=True, exist_ok=True)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))
    # rank 0's node got the index; every other node needs its own copy to load its shard
    index = [(directory / METADATA).read_bytes() if rank == 0 else None]
    dist.broadcast_object_list(index, src=0)
    _write_atomic(directory / METADATA, bytes(index[0] or b""))
    dist.barrier()
    _write_atomic(directory / STATE, json.dumps(state, indent=1).encode())
    dist.barrier()


def load(model, optimizer, directory: Path, *, rank: int) -> tuple[dict[str, Any], list[str]]:
    """Load the sharded checkpoint in ``directory`` into ``model``/``optimizer``.

    Returns its trainer state and the files this rank received from other nodes first.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    both: dict[str, Any] = {"model": model_state, "optim": optim_state}
    received = make_reachable(directory, [METADATA, STATE], rank=rank)
    received += make_reachable(directory, sorted(needed_files(directory, both)), rank=rank)
    state = json.loads((directory / STATE).read_text())
    dcp.load(both, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=both["model"], optim_state_dict=both["optim"])
    return state, received


def needed_files(directory: Path, state_dict: dict[str, Any]) -> set[str]:
    """The shard files this rank's load plan reads for ``state_dict`` (DCP's own planner over the index).

    Not just ``__R_0.distcp``: DCP saves a replicated value (e.g. the optimizer's step counts) once, in
    whichever rank's file it balanced it to, so every rank reads a few other ranks' files too.
    """
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    metadata = FileSystemReader(str(directory)).read_metadata()
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state_dict, metadata, False)
    plan = planner.create_local_plan()
    return {metadata.storage_data[item.storage_index].relative_path for item in plan.items}


def make_reachable(directory: Path, wanted: list[str], *, rank: int) -> list[str]:
    """Copy to this node each of ``wanted`` (files of ``directory``) it lacks; return the names received.

    Every rank states what it holds and lacks; each missing file is broadcast once from the lowest rank that
    holds it. A file no node holds is a checkpoint that cannot be resumed: the error says which.
    """
    import torch.distributed as dist

    held = sorted(p.name for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    needs = [name for name in wanted if name not in held]
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"held": held, "needs": needs})
    missing = sorted({name for entry in everyone for name in entry["needs"]})
    received = []
    for name in missing:
        owners = [r for r, entry in enumerate(everyone) if name in entry["held"]]
        if not owners:
            raise WorkloadError(f"resume: {directory / name} is on no node of this run (each node keeps only its own ranks' shards); "
                                "bring back the nodes of the previous run, or start without resume")
        payload = [(directory / name).read_bytes() if rank == owners[0] else None]
        dist.broadcast_object_list(payload, src=owners[0])
        if name in needs:
            directory.mkdir(parents=True, exist_ok=True)
            _write_atomic(directory / name, bytes(payload[0] or b""))
            received.append(name)
    dist.barrier()
    return received


def save_final(model, tokenizer, output_dir: Path, run_id: str, *, rank: int) -> Path:
    """Gather the full model to rank 0 and write a Hugging Face directory (the LoRA adapter for peft models).

    Only global rank 0 writes ``output_dir/final`` (swapped in whole); ``from_pretrained`` loads it on one machine.
    """
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    final = output_dir / "final"
    if rank == 0:
        partial = output_dir / f".final.partial-{run_id or os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        from torch.nn.parallel import DistributedDataParallel

        plain = model.module if isinstance(model, DistributedDataParallel) else model  # balance = "auto" under DDP
        plain.save_pretrained(str(partial), state_dict=full)
        tokenizer.save_pretrained(str(partial))
        previous = output_dir / f".final.previous-{run_id or os.getpid()}"
        if final.exists():
            os.replace(final, previous)
        os.replace(partial, final)
        shutil.rmtree(previous, ignore_errors=True)
    dist.barrier()
    return final


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
