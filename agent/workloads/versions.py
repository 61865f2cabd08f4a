"""Print the software versions this interpreter sees, as one marked JSON line (the agent's version probe).

The agent (:mod:`agent.probes.software`) runs this file's text with the *training interpreter*
(``python -c``), never in its own process: package versions come from ``importlib.metadata``
without importing anything; only torch's CUDA, NCCL and cuDNN values need ``import torch``, and
only when torch is installed. Standalone on purpose: the training interpreter need not have ftwiz.
"""

import importlib.metadata as metadata
import json
import platform
import sys
from typing import Any

MARKER = "FTWIZ-SOFTWARE:"
"""Prefix of the result line; anything the interpreter prints before it (site hooks, warnings) is ignored."""


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions():
    out: dict[str, Any] = {"python": platform.python_version()}
    for name in ("transformers", "peft", "bitsandbytes", "accelerate"):
        out[name] = version(name)
    if version("torch") is None:
        return out
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
            # cuDNN 9 encodes major*10000 + minor*100 + patch; earlier majors major*1000 + minor*100 + patch
            major = cudnn // 10000 if cudnn >= 90000 else cudnn // 1000
            minor = (cudnn % 10000) // 100 if cudnn >= 90000 else (cudnn % 1000) // 100
            out["cudnn"] = f"{major}.{minor}.{cudnn % 100}"
    except Exception as error:
        out["torch"] = version("torch")
        out["error"] = f"torch is installed but failed to import: {type(error).__name__}: {error}"
    return out


if __name__ == "__main__":
    sys.stdout.write("\n" + MARKER + json.dumps(versions()) + "\n")
