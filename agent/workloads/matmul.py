"""Time a fixed matmul on every visible GPU (or the CPU) and print TFLOP/s as one marked JSON line.

The agent (:mod:`agent.probes.compute`) runs this file's text with the *training interpreter*
(``python -c TEXT SPEC``), never in its own process, with ``CUDA_VISIBLE_DEVICES`` set to the GPUs the run
will use. ``SPEC`` is JSON: ``{"device": "cuda"|"cpu", "threads": N|null, "budget_s": S}``. Each device
runs square matmuls (bf16 on GPUs that have it, else fp16; float32 on the CPU with ``threads`` torch
threads, as a CPU rank gets) for ``budget_s`` seconds after one warm-up. Standalone on purpose: the
training interpreter need not have ftwiz.
"""

import json
import sys
import time

MARKER = "FTWIZ-COMPUTE:"
"""Prefix of the result line (must equal ``agent.probes.compute._MARKER``)."""

GPU_N = 4096
"""Side of the GPU matmul: 137 GFLOP each, ~0.2 ms on an H100, ~15 ms on a small card."""
CPU_N = 512
"""Side of the CPU matmul: 0.27 GFLOP each, ~5 ms on a core."""


def timed(torch, n, dtype, device, budget_s, sync):
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    torch.matmul(a, b)
    sync()
    iterations, started = 0, time.perf_counter()
    while True:
        torch.matmul(a, b)
        iterations += 1
        if iterations % 8 == 0 or device.type == "cpu":
            sync()
            elapsed = time.perf_counter() - started
            if elapsed >= budget_s and iterations >= 3:
                return 2.0 * n**3 * iterations / elapsed / 1e12


def measure(spec):
    import torch

    budget = float(spec.get("budget_s") or 0.5)
    if spec.get("device") == "cuda":
        if not torch.cuda.is_available():
            return {"error": f"torch {torch.__version__} sees no CUDA device"}
        count = torch.cuda.device_count()
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        devices = []
        for i in range(count):
            device = torch.device("cuda", i)
            tflops = timed(torch, GPU_N, dtype, device, budget / count, lambda d=device: torch.cuda.synchronize(d))
            devices.append({"index": i, "name": torch.cuda.get_device_name(i), "tflops": tflops})
        return {"dtype": str(dtype).replace("torch.", ""), "devices": devices}
    threads = spec.get("threads")
    if threads:
        torch.set_num_threads(int(threads))
    tflops = timed(torch, CPU_N, torch.float32, torch.device("cpu"), budget, lambda: None)
    return {"dtype": "float32", "threads": torch.get_num_threads(), "devices": [{"index": None, "name": "cpu", "tflops": tflops}]}


def main(argv):
    try:
        out = measure(json.loads(argv[1]))
    except Exception as error:  # every failure is an answer, not a traceback
        out = {"error": f"{type(error).__name__}: {error}"}
    print(MARKER + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv)
