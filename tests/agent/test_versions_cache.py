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
