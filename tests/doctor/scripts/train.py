"""A small user training script for the doctor's induced failures (gloo, CPU), one failure per --fail.

Every rank joins the process group, trains a tiny linear model with an all-reduce per step, and prints
``step N loss: X``. ``--fail`` picks the failure: ``code`` (rank 2 raises in user code), ``nan``
(a learning rate that drives the loss to NaN), ``data`` (the dataset is missing on the ranks of the
node named by --node), ``disk`` (rank 0 saves a checkpoint into --out), ``none`` (a healthy run).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def load_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def check_batch(rank: int, fail: str) -> None:
    if fail == "code" and rank == 2:
        raise ValueError(f"batch on rank {rank} has no labels")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail", default="none", choices=["none", "code", "nan", "data", "disk"])
    parser.add_argument("--data", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.data:
        rows = load_rows(args.data)
        print(f"rank {rank}: {len(rows)} rows", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    lr = 1e12 if args.fail == "nan" else 0.01
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for step in range(1, args.steps + 1):
        check_batch(rank, args.fail) if step == 3 else None
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if rank == 0:
            print(f"step {step} loss: {loss.item():.4f}", flush=True)
        time.sleep(0.2)
    if args.fail == "disk" and rank == 0:
        # As save_pretrained does: safetensors (the format every HF checkpoint is written in).
        from safetensors.torch import save_file

        save_file({"weight": torch.zeros(4 << 20)}, os.path.join(args.out, "model.safetensors"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
