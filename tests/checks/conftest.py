"""Helpers for the checklist tests: run the checklist in-process, restart one agent with other flags,
wait for fresh agent samples, and a stub interpreter whose torch reports another version."""

from __future__ import annotations

import contextlib
import json
import stat
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from tui.checks import CheckResult, run_checklist_sync

FAST = {"bandwidth_seconds": 0.3}
"""Probe options that keep a checklist run short in tests (the bandwidth stream is 0.3 s)."""


def run(config, **kw) -> list[CheckResult]:
    """The full checklist against ``config`` with short probes."""
    kw.setdefault("options", FAST)
    return run_checklist_sync(config, **kw)


def failures(results: Sequence[CheckResult]) -> set[tuple[str, str | None]]:
    """``{(id, node)}`` of the failing rows."""
    return {(r.id, r.node) for r in results if r.status == "fail"}


def rows(results: Sequence[CheckResult], check_id: str, node: str | None = None) -> list[CheckResult]:
    """Rows of ``check_id`` (for ``node`` when given)."""
    return [r for r in results if r.id == check_id and (node is None or r.node == node)]


def describe(results: Sequence[CheckResult]) -> str:
    """Readable dump for assertion messages."""
    return "\n".join(f"{r.status:4} {r.id} {r.node or '-'}: {r.detail} | {r.hint}" for r in results)


def wait_fresh(cluster, since: float, timeout: float = 15.0) -> None:
    """Wait until every agent serves a hardware sample taken after ``since`` (agents sample every second)."""
    deadline = time.monotonic() + timeout
    pending = list(cluster.nodes)
    while pending:
        pending = [n for n in pending if not n.agent_healthy() or (n.agent_get("/v1/report").get("sampled_at") or 0) <= since]
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"no fresh sample from {[n.name for n in pending]} within {timeout} s")
        if pending:
            time.sleep(0.2)


@contextlib.contextmanager
def agent_with_args(node, extra: Sequence[str]) -> Iterator[None]:
    """Restart ``node``'s agent with ``extra`` flags appended (argparse: the last flag wins); restore after."""
    original = type(node).agent_argv.__get__(node)
    node.agent_argv = lambda: original() + list(extra)
    try:
        node.stop_agent()
        node.start_agent(wait=True, timeout=60)
        yield
    finally:
        del node.agent_argv
        node.stop_agent()
        node.start_agent(wait=True, timeout=60)


def make_fake_torch_python(directory: Path, version: str = "2.0.0") -> Path:
    """A stub "interpreter": a wrapper that runs this Python with a fake ``torch`` package first on the path.

    The fake package (``torch/__init__.py`` with ``__version__ = version`` and a dist-info so
    ``importlib.metadata`` sees it) is NOT torch: it only answers the agent's version probe, standing in for
    a node whose venv has another torch release.
    """
    site = directory / "fake-site"
    pkg = site / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        '"""Stub torch for ftwiz tests: reports a version, nothing else (not a real torch)."""\n'
        f"__version__ = {version!r}\n"
        "class version:\n    cuda = None\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
        "    class nccl:\n        @staticmethod\n        def version():\n            raise RuntimeError('no NCCL in a CPU build')\n"
        "class backends:\n    class cudnn:\n        @staticmethod\n        def is_available():\n            return False\n"
    )
    info = site / f"torch-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    wrapper = directory / "python-fake-torch"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper


def tiny_llama_config() -> dict:
    """An HF config.json for a tiny Llama (the field-notes model)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
            "tie_word_embeddings": False}


def place_job_files(workdir: Path) -> None:
    """A dataset and a model directory (config.json only) in a node's workdir."""
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    (workdir / "data" / "train.jsonl").write_text('{"text": "hello"}\n')
    (workdir / "models" / "tiny").mkdir(parents=True, exist_ok=True)
    (workdir / "models" / "tiny" / "config.json").write_text(json.dumps(tiny_llama_config()))


@pytest.fixture
def fake_torch_python(tmp_path: Path) -> Path:
    """See :func:`make_fake_torch_python`."""
    tmp_path.chmod(0o755)
    return make_fake_torch_python(tmp_path)


@pytest.fixture
def fresh3(cluster3):
    """``cluster3`` after its heal, once every agent serves a sample taken after the heal (so a link or
    MTU fix made by the heal is visible in the reports)."""
    wait_fresh(cluster3, time.time())
    return cluster3


@pytest.fixture(autouse=True)
def _mesh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every checklist test keeps the cached full mesh (``tui/checks/meshcache.py``) in a temp dir of its own."""
    path = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))
    return path
