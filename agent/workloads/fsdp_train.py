"""The sft recipe's FSDP2 path: a plain training loop over a ``fully_shard``-ed model.

With ``balance = "auto"`` both shardings train here (DDP wraps the model instead of sharding it) and
:mod:`.balancing` feeds each rank its share of every global batch.

The HF Trainer is not used here: with FSDP on CPU it trains as plain DDP without a word, so a CPU test
through it would prove nothing about the sharding a GPU user gets. This loop mirrors the Trainer's defaults
for the DDP path (AdamW, linear decay without warmup, gradient clipping at 1.0, the loss averaged over the
ranks and the logging window, a DistributedSampler seeded with the run's seed) and speaks the same protocol
lines (heartbeat, progress, checkpoint, done), so the launcher cannot tell the two apart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import balancing, checkpoint
from .dist import Ranks, peak_memory
from .errors import note
from .fsdp import shard, shard_report
from .protocol import emit
from .spec import Spec

MAX_GRAD_NORM = 1.0  # the HF Trainer's default, so FSDP and DDP runs of one job train alike
PROBE_TOKENS = 16


def run(spec: Spec, ranks: Ranks, plan: Any) -> int:
    """Train with FSDP2; return the exit code. The process group is already up."""
    import torch
    import torch.distributed as dist

    from . import sft
    from .data import PaddingCollator, TokenDataset, tokenize_records

    backend = dist.get_backend()
    sft.quiet_libraries()
    for message in plan.notes:
        if ranks.is_main:
            note(message, rank=ranks.rank)
    tokenizer = sft._load_tokenizer(plan)
    examples = tokenize_records(plan.records, tokenizer, int(spec["seq_len"]))
    torch.manual_seed(spec.seed)  # FSDP does not broadcast rank 0's init: every rank must build the same model
    model = sft._load_model(spec, plan, ranks)
    if spec["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    compute = torch.bfloat16 if plan.bf16 else None
    if plan.fp16 and ranks.is_main:
        note("sharding = \"fsdp\" runs fp16 GPUs in fp32 (no loss scaling under FSDP2 here); use bf16 where the GPU has it",
             rank=ranks.rank)
    offload = bool(spec.job.get("fsdp_offload", False))
    if offload and backend != "nccl":
        offload = False  # FSDP2's CPUOffloadPolicy needs an accelerator; on CPU the shards already live in host RAM
        if ranks.is_main:
            note("fsdp_offload = true has nothing to offload without a GPU: the shards already live in host RAM", rank=ranks.rank)
    fsdp = spec["sharding"] == "fsdp"
    if fsdp:
        units = shard(model, ranks, backend, compute_dtype=compute, offload=offload)
        report = shard_report(model, ranks, units)
        print(report.line(), flush=True)
        emit("note", rank=ranks.rank, message=report.line(), **report.fields())
    else:  # sharding = "ddp" with balance = "auto": this loop, the model replicated
        model = balancing.wrap_ddp(model, ranks, backend)

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=float(spec["learning_rate"]), weight_decay=0.0)
    dataset: Any = TokenDataset(examples)  # a map-style dataset (len + getitem), not a torch Dataset subclass
    sampler: Any = torch.utils.data.DistributedSampler(dataset, num_replicas=ranks.world_size, rank=ranks.rank, shuffle=True, seed=spec.seed)
    loader: Any = torch.utils.data.DataLoader(dataset, batch_size=int(spec["micro_batch_size"]), sampler=sampler,
                                              collate_fn=PaddingCollator(tokenizer.pad_token_id))
    accum = int(spec["grad_accum_steps"])
    per_epoch = max(1, math.ceil(len(loader) / accum))
    balancer = None
    if spec["balance"] == "auto":
        collate = PaddingCollator(tokenizer.pad_token_id)
        balancer = balancing.Balancer(model, dataset, collate, spec, ranks, fsdp=fsdp)
        per_epoch = balancer.steps_per_epoch
    total = int(spec["max_steps"]) if int(spec["max_steps"]) > 0 else math.ceil(per_epoch * float(spec["epochs"]))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, (total - step) / total))

    start = 0
    resume_from = sft._resume_checkpoint(spec, plan.output_dir, ranks)
    if resume_from is not None:
        state, received = checkpoint.load(model, optimizer, resume_from, rank=ranks.rank)
        if received:
            note(f"resume: rank {ranks.rank} received {', '.join(received)} of {resume_from.name} from another node "
                 "(this node did not hold that shard)", rank=ranks.rank)
        scheduler.load_state_dict(state["scheduler"])
        start = int(state["step"])
    if ranks.is_main and fsdp:
        print(f"ftwiz: fsdp {spec['method']} on {plan.model}: {report.total_params:,} parameters over {ranks.world_size} ranks, "
              f"{len(examples)} examples, compute {str(compute or torch.float32).replace('torch.', '')}; "
              f"training from step {start} to {total}", flush=True)

    if balancer is not None:
        balancer.calibrate(start)
    batches = _micro_batches(loader, sampler, skip=start * accum)
    window_loss, window_steps = 0.0, 0
    last_time, tokens = time.time(), 0
    model.train()
    for step in range(start + 1, total + 1):
        step_loss = 0.0
        if balancer is not None:
            step_loss, step_tokens = balancer.step(step)
            tokens += step_tokens
        else:
            for micro in range(accum):
                batch = next(batches)
                model.set_requires_gradient_sync(micro == accum - 1)  # reduce-scatter once per optimizer step
                loss = model(**batch).loss / accum
                loss.backward()
                step_loss += float(loss.detach())
                tokens += int(batch["attention_mask"].sum())
        torch.nn.utils.clip_grad_norm_(trainable, MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        window_loss, window_steps = window_loss + step_loss, window_steps + 1
        emit("heartbeat", rank=ranks.rank, step=step, **(balancer.finish_step(step) if balancer is not None else {}))
        if step % int(spec["logging_steps"]) == 0 or step == total:
            # balanced: each rank's step_loss is its share of the global batch's mean, so the ranks' sum is the mean
            mean = (_sum_over_ranks if balancer is not None else _mean_over_ranks)(window_loss / window_steps, backend, ranks)
            rate = _sum_over_ranks(float(tokens), backend, ranks)
            now = time.time()
            if ranks.is_main:
                emit("progress", rank=ranks.rank, step=step, total_steps=total, loss=round(mean, 8),
                     learning_rate=scheduler.get_last_lr()[0], tokens_per_s=round(rate / max(now - last_time, 1e-9), 1),
                     epoch=round(step / per_epoch, 4))
            window_loss, window_steps, tokens, last_time = 0.0, 0, 0, now
        if step % int(spec["save_steps"]) == 0 or step == total:
            _save(model, optimizer, scheduler, spec, plan.output_dir, step, total, ranks)

    probe = _probe_logits(model, tokenizer, backend, ranks)
    if ranks.is_main:
        emit("note", rank=ranks.rank, message="fsdp: logits of the trained model on a fixed probe", probe_logits=probe)
    final = checkpoint.save_final(model, tokenizer, plan.output_dir, spec.run_id, rank=ranks.rank)
    throughput = balancer.throughput() if balancer is not None else None  # a collective: every rank
    done: dict[str, Any] = {"status": "ok", **peak_memory(backend)}
    if ranks.is_main:
        done.update(adapter_path=str(final), step=total)
        if throughput is not None:
            done.update(throughput=throughput)
    emit("done", rank=ranks.rank, **done)
    if ranks.is_main:
        what = "adapter" if spec["method"] != "full" else "model"
        print(f"ftwiz: trained to step {total}; {what} written to {final}", flush=True)
    return 0


def _micro_batches(loader, sampler, *, skip: int) -> Iterator[dict]:
    """Micro batches forever, epoch after epoch, after skipping the ``skip`` a resumed run already trained on."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            if skip:
                skip -= 1
                continue
            yield batch
        epoch += 1


def _save(model, optimizer, scheduler, spec: Spec, output_dir: Path, step: int, total: int, ranks: Ranks) -> None:
    directory = output_dir / f"checkpoint-{step}"
    state = {"step": step, "total_steps": total, "world_size": ranks.world_size, "scheduler": scheduler.state_dict(),
             "sharding": "fsdp", "method": spec["method"]}
    checkpoint.save(model, optimizer, directory, state, rank=ranks.rank)
    if ranks.is_main:
        emit("checkpoint", rank=ranks.rank, step=step, path=str(directory))
    if spec.save_total_limit and ranks.local_rank == 0:
        _prune(output_dir, keep=int(spec.save_total_limit))


def _prune(output_dir: Path, *, keep: int) -> None:
    import shutil

    for old in checkpoint.checkpoint_steps(output_dir)[:-keep]:
        shutil.rmtree(output_dir / f"checkpoint-{old}", ignore_errors=True)


def _mean_over_ranks(value: float, backend: str, ranks: Ranks) -> float:
    return _sum_over_ranks(value, backend, ranks) / ranks.world_size


def _sum_over_ranks(value: float, backend: str, ranks: Ranks) -> float:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", ranks.local_rank) if backend == "nccl" else torch.device("cpu")
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item())


def _probe_logits(model, tokenizer, backend: str, ranks: Ranks, count: int = 8) -> list[float] | None:
    """The last position's first ``count`` logits on a fixed input (every rank runs the sharded forward)."""
    import torch

    device = torch.device("cuda", ranks.local_rank) if backend == "nccl" else torch.device("cpu")
    ids = torch.tensor([probe_ids(len(tokenizer))], device=device)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    return [round(float(x), 6) for x in logits[0, -1, :count]] if ranks.is_main else None


def probe_ids(vocab_size: int) -> list[int]:
    """The fixed probe input: ``PROBE_TOKENS`` ids spread over the vocabulary (a test feeds the same to the saved model)."""
    return [(7 + 13 * i) % vocab_size for i in range(PROBE_TOKENS)]

