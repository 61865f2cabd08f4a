"""The matmul rate of the GPUs (or the CPU) a run will use, measured by the *training interpreter*.

Like :mod:`agent.probes.software`, this starts the training interpreter with the text of
:mod:`agent.workloads.matmul` and reads one marked JSON line back, with a timeout; the agent never imports
torch. GPUs are chosen with ``CUDA_VISIBLE_DEVICES`` (NVML order), CPU ranks' threads with ``threads``.
A result is kept per interpreter, device and device set (and thread count), so a second checklist pays
nothing; ``fresh`` measures again. One probe runs at a time: two at once would share the devices they time.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from shared.models import ComputeDevice, ComputeProbeRequest, ComputeProbeResult

__all__ = ["ComputeProbe", "matmul_script", "run_matmul"]

_SCRIPT_PATH = Path(__file__).resolve().parents[1] / "workloads" / "matmul.py"
"""Workload-side code (the only place torch is imported)."""

_MARKER = "FTWIZ-COMPUTE:"
"""Must equal ``MARKER`` in the script (a test holds them together)."""

CacheKey = tuple[str, str, tuple[int, ...], Optional[int]]


@lru_cache(maxsize=1)
def matmul_script() -> str:
    """The text the training interpreter runs with ``-c`` (read once)."""
    return _SCRIPT_PATH.read_text(encoding="utf-8")


def run_matmul(python: str, request: ComputeProbeRequest) -> ComputeProbeResult:
    """Run the matmul script in ``python``; errors are reported in ``error``, never raised."""
    started, clock = time.time(), time.monotonic()

    def answer(**fields: object) -> ComputeProbeResult:
        return ComputeProbeResult(python=python, device=request.device, measured_at=started,
                                  seconds=round(time.monotonic() - clock, 3), **fields)

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in request.gpus) if request.device == "cuda" else ""
    if request.device == "cuda" and not request.gpus:
        return answer(error="device cuda needs the GPU indices the run will use (gpus)")
    if request.threads:
        env["OMP_NUM_THREADS"] = str(request.threads)
    spec = json.dumps({"device": request.device, "threads": request.threads, "budget_s": request.budget_s})
    try:
        completed = subprocess.run(
            [python, "-c", matmul_script(), spec], stdin=subprocess.DEVNULL, capture_output=True, timeout=request.timeout_s,
            cwd=tempfile.gettempdir(), env=env, check=False,  # never pick up a stray torch/ directory from the agent's cwd
        )
    except FileNotFoundError:
        return answer(error=f"training interpreter {python} does not exist: pass --python with the interpreter torchrun uses")
    except PermissionError:
        return answer(error=f"training interpreter {python} is not executable by the agent's user")
    except subprocess.TimeoutExpired:
        return answer(error=f"training interpreter {python} did not finish the matmul probe within {request.timeout_s:g} s")
    except OSError as error:
        return answer(error=f"training interpreter {python} could not start: {error}")
    for line in reversed(completed.stdout.decode("utf-8", errors="replace").splitlines()):
        if not line.startswith(_MARKER):
            continue
        try:
            values = json.loads(line[len(_MARKER):])
            if values.get("error"):
                return answer(error=f"matmul probe in {python}: {values['error']}")
            devices = [ComputeDevice.model_validate(d) for d in values["devices"]]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return answer(error=f"matmul probe in {python} printed an unexpected line: {error}")
        if request.device == "cuda":  # the script counts visible devices from 0: name them by NVML index
            devices = [d.model_copy(update={"index": request.gpus[i] if i < len(request.gpus) else d.index}) for i, d in enumerate(devices)]
        return answer(dtype=str(values.get("dtype", "")), threads=values.get("threads"), devices=devices)
    stderr = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
    detail = stderr[-1] if stderr else f"exit status {completed.returncode}"
    return answer(error=f"training interpreter {python} failed the matmul probe: {detail}")


class ComputeProbe:
    """The agent's compute probe: one at a time, results cached per interpreter and device set."""

    def __init__(self, python: str, *, runner: Callable[[str, ComputeProbeRequest], ComputeProbeResult] = run_matmul) -> None:
        self.python = python
        self._runner = runner
        self._lock = threading.Lock()
        self._cache: dict[CacheKey, ComputeProbeResult] = {}

    def key(self, request: ComputeProbeRequest) -> CacheKey:
        gpus = tuple(request.gpus) if request.device == "cuda" else ()
        return (self.python, request.device, gpus, request.threads if request.device == "cpu" else None)

    def measure(self, request: ComputeProbeRequest) -> ComputeProbeResult:
        """A cached result (``cached`` true) unless ``fresh``; a failed probe is not cached (the next one retries)."""
        key = self.key(request)
        with self._lock:
            held = self._cache.get(key)
            if held is not None and not request.fresh:
                return held.model_copy(update={"cached": True})
            result = self._runner(self.python, request)
            if result.error is None:
                self._cache[key] = result
            return result
