"""Software versions as the *training interpreter* sees them.

The agent runs in its own environment; torchrun runs another interpreter (``--python``). This
probe starts that interpreter with a small script and reads JSON back, with a timeout. Package
versions come from ``importlib.metadata`` (no import); only torch's CUDA, NCCL and cuDNN values
need ``import torch``, and only when torch is installed. The agent itself never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from typing import Optional

from shared.models import SoftwareVersions

__all__ = ["probe_software", "PROBE_SCRIPT", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 90.0
"""Importing torch on a cold page cache can take tens of seconds."""

_MARKER = "FTWIZ-SOFTWARE:"

PROBE_SCRIPT = r"""
import json, platform, sys
import importlib.metadata as metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

out = {"python": platform.python_version()}
for name in ("transformers", "peft", "bitsandbytes", "accelerate"):
    out[name] = version(name)
if version("torch") is not None:
    try:
        import torch
        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        out["cuda_available"] = bool(torch.cuda.is_available())
        try:
            nccl = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            out["nccl"] = None
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        if cudnn:
            major = cudnn // 10000 if cudnn >= 90000 else cudnn // 1000
            minor = (cudnn % 10000) // 100 if cudnn >= 90000 else (cudnn % 1000) // 100
            out["cudnn"] = f"{major}.{minor}.{cudnn % 100}"
    except Exception as error:
        out["torch"] = version("torch")
        out["error"] = f"torch is installed but failed to import: {type(error).__name__}: {error}"
sys.stdout.write("\n__MARKER__" + json.dumps(out) + "\n")
""".replace("__MARKER__", _MARKER)


def probe_software(python: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> SoftwareVersions:
    """Run the probe script in ``python``; errors are reported in ``error``, never raised."""
    started = time.time()

    def failed(message: str) -> SoftwareVersions:
        return SoftwareVersions(python_executable=python, error=message, probed_at=started)

    try:
        completed = subprocess.run(
            [python, "-c", PROBE_SCRIPT],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            cwd=tempfile.gettempdir(),  # never pick up a stray torch/ directory from the agent's cwd
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            check=False,
        )
    except FileNotFoundError:
        return failed(f"training interpreter {python} does not exist: pass --python with the interpreter torchrun uses")
    except PermissionError:
        return failed(f"training interpreter {python} is not executable by the agent's user")
    except subprocess.TimeoutExpired:
        return failed(f"training interpreter {python} did not answer within {timeout_s:g} s (importing torch?)")
    except OSError as error:
        return failed(f"training interpreter {python} could not start: {error}")
    for line in reversed(completed.stdout.decode("utf-8", errors="replace").splitlines()):
        if line.startswith(_MARKER):
            try:
                values = json.loads(line[len(_MARKER):])
            except ValueError:
                break
            return SoftwareVersions(python_executable=python, probed_at=started, **_known(values))
    stderr = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
    detail = stderr[-1] if stderr else f"exit status {completed.returncode}"
    return failed(f"training interpreter {python} failed the version probe: {detail}")


def _known(values: object) -> dict:
    """Keep only the fields the model knows, with the types it expects."""
    if not isinstance(values, dict):
        return {}
    fields = set(SoftwareVersions.model_fields) - {"python_executable", "probed_at"}
    return {key: value for key, value in values.items() if key in fields and (value is None or isinstance(value, (str, bool)))}
