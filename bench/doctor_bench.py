"""The failure doctor on a big noisy log: ``ftwiz --why-log`` of a generated 300 MB run log.

The log is what a long run leaves: 8 ranks' tqdm bars, loss dicts, NCCL INFO chatter, deprecation and
fp16 loss-scale warnings in the first steps, ftwiz progress lines, a few invalid UTF-8 bytes and one 5 MB line without a
newline, then a CUDA OOM traceback on rank 5 and the other ranks' echoes. Measured with
``/usr/bin/time -v``: wall seconds, CPU seconds and peak RSS of the whole ``ftwiz --why-log`` process; the baseline is
``wc -l`` over the same file (the disk/page-cache speed floor). Targets (issue 17): ≤ 60 s and ≤ 400 MB on a
2-core machine; the diagnosis must be ``oom.gpu`` on rank 5.

Run: ``python -m bench doctor`` (``--quick``: a 60 MB log).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_OOM = """[rank5]: Traceback (most recent call last):
[rank5]:   File "/work/train.py", line 88, in <module>
[rank5]:     loss.backward()
[rank5]:   File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward
[rank5]:     torch.autograd.backward(
[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.10 GiB
"""


def write_log(path: Path, size: int, *, seed: int = 17) -> None:
    """A noisy run log of about ``size`` bytes ending in a rank's CUDA OOM."""
    rng = random.Random(seed)
    noise = [
        "node0/{r} | {{'loss': {l:.4f}, 'grad_norm': {g:.3f}, 'learning_rate': 1.9e-05, 'epoch': {e:.2f}}}",
        "node0/{r} | {p:3d}%|####      | {s}/20000 [12:34<45:12,  1.23it/s]",
        "node0/{r} | node0:1234:5678 [{r}] NCCL INFO Channel 03/0 : {r} -> 0 via P2P/CUMEM/read",
        "node0/{r} | /venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:61: UserWarning: None of the inputs have requires_grad=True",
        "node0/{r} | [2026-11-22 06:{m:02d}:{sec:02d},123] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped=3, lr=[1.9e-05], mom=[(0.9, 0.999)]",
        "node0/{r} | {{\"ftwiz\": \"progress\", \"rank\": {r}, \"step\": {s}, \"loss\": {l:.4f}, \"time\": 1795000000.{s}}}",
        "node0/{r} | Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0",
    ]
    written = 0
    step = 0
    with path.open("wb") as fh:
        fh.write(b"node0/- | [2026-11-22 06:00:00] torchrun: starting 8 workers\n")
        while written < size:
            step += 1
            chunk = []
            for _ in range(1000):
                r = rng.randrange(8)
                template = noise[rng.randrange(len(noise))] if rng.random() < 0.3 else noise[0]
                chunk.append(template.format(r=r, l=rng.random() * 3, g=rng.random(), e=step / 1e4, p=step % 100,
                                             s=step, m=step % 60, sec=step % 60))
            blob = ("\n".join(chunk) + "\n").encode()
            if step < 20:  # fp16 loss-scale warm-up: overflows in the first steps only
                blob += f"node0/{step % 8} | [2026-11-22 06:00:{step:02d},123] [INFO] [stage_1_and_2.py:1800:step] [deepspeed] OVERFLOW! Rank {step % 8} Skipping step.\n".encode()
            if step % 500 == 0:
                blob += b"node0/3 | bad bytes \xff\xfe\xc3( in a tokenizer warning\n"
            if step == 700:
                blob += b"node0/2 | " + b"\r 1%|" * 1_000_000 + b"\n"  # a 5 MB carriage-return line
            fh.write(blob)
            written += len(blob)
        fh.write(_OOM.replace("[rank5]: ", "node0/5 | ").encode())
        for r in (0, 1, 2, 3, 4, 6, 7):
            fh.write(f"node0/{r} | [rank{r}]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was a "
                     "network error, Connection reset by peer\n".encode())
        fh.write(b"node0/- | torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")


def _timed(command: list[str]) -> tuple[float, float, float, str]:
    """``(wall s, CPU s, peak RSS MB, stdout)`` of ``command`` under /usr/bin/time -v."""
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=False, cwd=ROOT)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    if done.returncode != 0 or not rss or not wall:
        raise RuntimeError(f"{command[:3]} failed ({done.returncode}): {done.stderr[-800:]}")
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr))
    return seconds, cpu, int(rss.group(1)) / 1024, done.stdout


def run(args: Any) -> list[dict]:
    size = (60 if getattr(args, "quick", False) else 300) * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="ftwiz-doctor-bench-") as tmp:
        log = Path(tmp) / "node0.log"
        started = time.monotonic()
        write_log(log, size)
        print(f"   wrote {log.stat().st_size / 2**20:.0f} MB in {time.monotonic() - started:.1f} s", file=sys.stderr)
        floor, _cpu, _rss, _out = _timed(["wc", "-l", str(log)])
        wall, cpu, rss, out = _timed([sys.executable, "-c", "import sys; from tui.cli import main; sys.exit(main())", "--why-log", str(log), "--json"])
    first = (json.loads(out).get("diagnoses") or [{}])[0]
    said = f"{first.get('cause')} rank {first.get('rank')}"
    mb = round(size / 2**20)
    return [
        {"measure": f"--why-log of a {mb} MB noisy log: wall ({said})", "value": round(wall, 2), "unit": "s",
         "baseline": round(floor, 2), "ratio": round(wall / floor, 1) if floor else None, "target": "<= 60 s (300 MB)"},
        {"measure": f"--why-log of a {mb} MB noisy log: CPU (user+sys; wall depends on the machine's load)",
         "value": round(cpu, 2), "unit": "s", "target": "<= 60 s (300 MB)"},
        {"measure": f"--why-log of a {mb} MB noisy log: peak RSS", "value": round(rss, 1), "unit": "MB",
         "target": "<= 400 MB"},
    ]
