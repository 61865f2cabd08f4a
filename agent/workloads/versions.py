"""Print the software versions this interpreter sees, as one marked JSON line (the agent's version probe).

The agent (:mod:`agent.probes.software`) runs this file's text with the *training interpreter*
(``python -c``), never in its own process: package versions come from ``importlib.metadata``
without importing anything; only torch's CUDA, NCCL and cuDNN values need ``import torch``, and
only when torch is installed. A CPU build's answer is cached under ``~/.cache/ftwiz`` keyed by the
interpreter and torch's files (sizes and times), so a later probe of the same install imports nothing. Standalone on purpose: the training interpreter need not have ftwiz.
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
    cache = _cache_path()
    cached = _read_cache(cache)
    if cached is not None:
        return {**out, **cached}
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
    if out.get("torch_cuda") is None and not out.get("cuda_available"):
        # A CPU build answers the same until its files change: the next probe reads this instead of importing
        # torch again (a second of CPU). A CUDA build is always asked live (a driver can come and go).
        _write_cache(cache, {k: out[k] for k in ("torch", "torch_cuda", "cuda_available", "nccl") if k in out})
    return out


def _cache_path():
    """The cache file for this interpreter and this torch install (its files' sizes and times in the name)."""
    import hashlib
    import os
    from importlib.util import find_spec

    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = next(iter(spec.submodule_search_locations))
    parts = [sys.executable, os.path.realpath(sys.executable), folder]
    try:
        for name in sorted(os.listdir(folder)):
            if name in ("__init__.py", "version.py") or (name.startswith("_C") and name.endswith(".so")) or name == "lib":
                info = os.stat(os.path.join(folder, name))
                parts.append(f"{name}:{info.st_size}:{info.st_mtime_ns}")
    except OSError:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ftwiz", "torch-versions-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24] + ".json")


def _read_cache(path):
    if path is None:
        return None
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("torch"), str) else None


def _write_cache(path, data):
    import os

    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: probe live every time


if __name__ == "__main__":
    sys.stdout.write("\n" + MARKER + json.dumps(versions()) + "\n")
