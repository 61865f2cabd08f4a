"""The node helper as shipped (``tui/launch/nodecode.py``, ``nodeside/boot.py``): one bundle of real files, run as the
controller runs it (``python -I -S -c <boot> <bundle> COMMAND``), from a folder where no ftwiz is importable."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nodeside.boot import pack, unpack
from tui.launch.nodecode import NODESIDE_FILES, helper_argv, helper_bundle, helper_command, package_files

ROOT = Path(__file__).resolve().parents[2]


def test_a_bundle_round_trips():
    files = {"p/__init__.py": "", "p/m.py": "X = 'ü'\n" * 100}
    packed = pack(files)
    assert packed.isascii() and shlex.quote(packed) == packed  # one shell word, nothing to escape
    assert unpack(packed) == files


def test_the_bundle_holds_the_packages_files_as_they_are():
    """No splicing: each file in the bundle is byte for byte the file the tests and the agent daemon import."""
    files = unpack(helper_bundle())
    assert sorted(files) == sorted(NODESIDE_FILES)
    for name, text in files.items():
        assert text == (ROOT / name).read_text(encoding="utf-8"), name


def test_the_bundle_is_the_same_for_the_same_files():
    assert helper_bundle.__wrapped__() == helper_bundle.__wrapped__()


def _module_path(module: str) -> str | None:
    for path in (module.replace(".", "/") + "/__init__.py", module.replace(".", "/") + ".py"):
        if (ROOT / path).is_file():
            return path
    return None


def test_the_bundle_holds_everything_the_helper_imports():
    """Every project module the helper reaches is in the bundle (the rest is the standard library, see
    tests/test_import_graph.py), so the node needs nothing installed."""
    todo, seen = ["nodeside/helper.py"], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                found = _module_path(name)
                if found is not None:
                    todo.append(found)
                    parts = name.split(".")
                    todo.extend(p for p in (_module_path(".".join(parts[:i])) for i in range(1, len(parts))) if p)
    assert seen <= set(NODESIDE_FILES), f"the helper imports files the bundle lacks: {sorted(seen - set(NODESIDE_FILES))}"


@pytest.mark.parametrize("path", [*NODESIDE_FILES, "nodeside/boot.py"])
def test_what_runs_on_a_node_parses_as_python_3_8(path):
    """Nodes run the helper under their own interpreter: nothing newer than Python 3.8's grammar."""
    ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path, feature_version=(3, 8))


def test_the_helper_runs_from_the_bundle_where_ftwiz_is_not_importable(tmp_path):
    done = subprocess.run(helper_argv(sys.executable, "ps", "r1-nothing-runs", "a"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"processes": []}


def test_a_failure_inside_the_bundle_names_the_bundles_file_and_line(tmp_path):
    """A traceback names the file in the bundle (``<ftwiz-bundle>/nodeside/...``) and the error."""
    done = subprocess.run(helper_argv(sys.executable, "ps", "not a run id!", "a"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert '"<ftwiz-bundle>/nodeside/procmatch.py"' in done.stderr
    assert "ValueError: run id 'not a run id!' does not match" in done.stderr


def test_the_shell_command_quotes_every_piece_and_lets_home_expand():
    command = helper_command("~/venv/bin/python", "follow", "/w d/runs/r1", "a;b", "0", "1.0")
    words = shlex.split(command.replace('"$HOME"', "HOME"))
    assert words[0] == "HOME/venv/bin/python"
    assert words[1:4] == ["-I", "-S", "-c"]
    assert words[5] == helper_bundle()
    assert words[6:] == ["follow", "/w d/runs/r1", "a;b", "0", "1.0"]


def test_python_dash_m_runs_the_installed_helper(tmp_path):
    """Where ftwiz is installed (a node with the agent), ``python3 -m nodeside`` is the same helper."""
    done = subprocess.run([sys.executable, "-m", "nodeside", "ps", "r1-nothing-runs", "a"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"processes": []}


def test_package_files_leave_caches_out_and_key_by_relative_path():
    files = package_files("nodeside")
    assert "helper.py" in files and "__init__.py" in files
    assert not any("__pycache__" in name for name in files)


def test_dump_through_the_bundle_writes_each_workers_stack_under_its_rank_prefix(tmp_path):
    """The helper's ``dump`` as a stall stop runs it: a tagged worker without a SIGUSR1 handler is read by py-spy
    (installed beside the interpreter), its stack appended to ``<node>.log`` as ``[rank<N>]:py-spy | ...``."""
    import os

    from shared.logprefix import split_rank

    assert (Path(sys.executable).parent / "py-spy").exists(), "py-spy (the train extra) is missing: make venv"
    env = {**os.environ, "FTWIZ_RUN_ID": "r-dump", "FTWIZ_NODE": "a", "RANK": "3", "LOCAL_RANK": "0"}
    worker = subprocess.Popen([sys.executable, "-c", "import time\ndef hang_here():\n    time.sleep(600)\nhang_here()"], env=env)
    try:
        done = subprocess.run(helper_argv(sys.executable, "dump", "r-dump", "a", str(tmp_path)), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        worker.kill()
        worker.wait()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["py_spy"] == [{"pid": worker.pid, "rank": 3}] and report["signalled"] == []
    lines = (tmp_path / "a.log").read_text().splitlines()
    assert lines and all(split_rank(line)[0] == 3 and split_rank(line)[1].startswith("py-spy | ") for line in lines)
    assert any("hang_here" in line for line in lines), lines


SLOW_IMPORTS = ("typing", "zipfile", "importlib.abc", "importlib.util", "tarfile", "asyncio")
"""Modules that cost a helper call tens of milliseconds on a loaded node (python -X importtime here: typing 14-40 ms,
zipfile 116 ms under load); the helper pays for its imports on every call."""


@pytest.mark.parametrize("path", [*NODESIDE_FILES, "nodeside/boot.py"])
def test_what_every_helper_call_imports_starts_fast(path):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    slow = [name for name in names if name in SLOW_IMPORTS]
    assert not slow, f"{path} imports {slow} at module level: import it where it is used (as cmd_launch does tarfile)"
