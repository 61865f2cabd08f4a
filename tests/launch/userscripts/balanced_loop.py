"""README "Balancing your own code": a DDP loop that trains on the share ftwiz planned for this rank.

Each rank reads its numbers from the environment (FTWIZ_MICRO_BATCH, FTWIZ_GRAD_ACCUM, FTWIZ_GLOBAL_BATCH), takes
its slice of every global batch (the ranks before it hold the samples before it), accumulates over its micro-batches
and weights the loss so that the gradient average is the mean over the whole global batch, whatever the shares.
"""

import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
micro = int(os.environ.get("FTWIZ_MICRO_BATCH", "4"))
accum = int(os.environ.get("FTWIZ_GRAD_ACCUM", "2"))
samples = micro * accum  # this rank's share of every step: FTWIZ_SAMPLES_PER_STEP
global_batch = int(os.environ.get("FTWIZ_GLOBAL_BATCH", str(samples * world)))
shares = [0] * world
dist.all_gather_object(shares, samples)
offset = sum(shares[:rank])  # where this rank's samples start in each global batch
assert sum(shares) == global_batch
print(f"balance-env rank={rank} node={os.environ.get('FTWIZ_NODE')} local_rank={os.environ.get('LOCAL_RANK')} "
      f"mode={os.environ.get('FTWIZ_BALANCE')} global={global_batch} samples={os.environ.get('FTWIZ_SAMPLES_PER_STEP')} "
      f"micro={micro} accum={accum} offset={offset}", flush=True)

torch.manual_seed(0)
data_x = torch.randn(256, 16)
data_y = data_x.sum(dim=1, keepdim=True)
model = DDP(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
steps = 6
for step in range(steps):
    start = (step * global_batch + offset) % len(data_x)
    mine = torch.arange(start, start + samples) % len(data_x)
    for m in range(accum):
        ids = mine[m * micro:(m + 1) * micro]
        with model.no_sync() if m < accum - 1 else contextlib.nullcontext():  # one all-reduce per step
            per_sample = ((model(data_x[ids]) - data_y[ids]) ** 2).mean(dim=1)
            (per_sample.sum() * world / global_batch).backward()  # DDP averages over ranks: Σ over the batch / global batch
    optimizer.step()
    optimizer.zero_grad()
    if rank == 0:
        print(f"step {step + 1}/{steps} | loss {per_sample.mean().item():.4f}", flush=True)
dist.destroy_process_group()
