"""The training interpreter's version probe caches a CPU build's answer (a second probe imports no torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.probes.software import probe_script

MARKER = "FTWIZ-SOFTWARE:"


def _probe(cache: Path, *extra: str) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, *extra, "-c", probe_script()], env=env, capture_output=True, text=True, timeout=300, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith(MARKER))
    return json.loads(line[len(MARKER):]), done.stderr


def test_a_cpu_builds_answer_is_read_back_without_importing_torch(tmp_path):
    first, _ = _probe(tmp_path)
    assert first["torch"] and first["torch_cuda"] is None  # the CPU wheel of the development machines
    (cached,) = list((tmp_path / "ftwiz").glob("torch-versions-*.json"))
    second, imports = _probe(tmp_path, "-X", "importtime")
    assert second == first
    assert not any(line.rstrip().endswith("| torch") for line in imports.splitlines()), "torch was imported again"
    cached.write_text(json.dumps({**json.loads(cached.read_text()), "torch": "9.9.9+cpu"}))
    assert _probe(tmp_path)[0]["torch"] == "9.9.9+cpu"  # what is read is the cache, keyed by this install


_FAKE_TORCH = '''\
__version__ = "{version}"
class version:
    cuda = None
class cuda:
    is_available = staticmethod(lambda: False)
    class nccl:
        @staticmethod
        def version():
            raise RuntimeError("no NCCL in a CPU build")
class backends:
    class cudnn:
        is_available = staticmethod(lambda: False)
'''


def _fake_torch(site: Path, version: str) -> Path:
    """A stand-in torch install on ``site`` (its package and its dist-info), answering ``version``."""
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch-1.0.dist-info").mkdir(exist_ok=True)
    (site / "torch-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 1.0\n")
    init = site / "torch" / "__init__.py"
    init.write_text(_FAKE_TORCH.format(version=version))
    return init


def test_a_changed_torch_install_is_probed_again(tmp_path):
    """The cache is keyed by the interpreter and torch's own files: a reinstalled torch (other sizes and times) misses
    it and is imported again, while the same install keeps reading its answer back."""
    site, cache = tmp_path / "site", tmp_path / "cache"
    init = _fake_torch(site, "1.0+cpu")
    env = {"PYTHONPATH": str(site)}

    def probe() -> str:
        done = subprocess.run([sys.executable, "-c", probe_script()], env={**os.environ, **env, "XDG_CACHE_HOME": str(cache)},
                              capture_output=True, text=True, timeout=60, check=True)
        return json.loads(next(x for x in done.stdout.splitlines() if x.startswith(MARKER))[len(MARKER):])["torch"]

    assert probe() == "1.0+cpu"
    (first,) = list((cache / "ftwiz").glob("torch-versions-*.json"))
    first.write_text(json.dumps({**json.loads(first.read_text()), "torch": "read from the cache"}))
    assert probe() == "read from the cache"  # the same install: no import
    _fake_torch(site, "2.0+cpu-a-longer-version")
    os.utime(init, ns=(first.stat().st_mtime_ns + 10**9,) * 2)
    assert probe() == "2.0+cpu-a-longer-version"  # torch/__init__.py changed: probed again
    assert len(list((cache / "ftwiz").glob("torch-versions-*.json"))) == 2
