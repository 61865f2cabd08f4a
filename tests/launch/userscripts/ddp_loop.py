"""A plain PyTorch DDP training loop, as a user writes one: torchrun env, gloo/nccl, its own log lines."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sleep", type=float, default=0.2)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=3)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--work", type=int, default=0, help="extra 128x128 matmuls per step (CPU-bound steps)")
    args = parser.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == args.hang_rank:
        while True:  # stops taking part before the first collective
            time.sleep(1)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 16)
    y = x.sum(dim=1, keepdim=True)
    w = torch.randn(128, 128)
    for step in range(1, args.steps + 1):
        if rank == args.fail_rank and step == args.fail_step:
            raise RuntimeError(f"simulated data error on rank {rank} at step {step}")
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        for _ in range(args.work):
            torch.mm(w, w)
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"epoch 0 | step {step}/{args.steps} | loss {loss.item():.4f} | world {world}", flush=True)
        time.sleep(args.sleep)
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        torch.save(model.module.state_dict(), "out/model.pt")
        print("saved out/model.pt", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
