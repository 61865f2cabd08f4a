"""The line protocol (pure) and the shipping constraints of the workloads package."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from agent.workloads.protocol import KINDS, emit, format_line, parse_line
from tests.workloads.helpers import REPO, SOURCE


def test_format_and_parse_round_trip():
    line = format_line("progress", rank=0, step=3, total_steps=10, loss=2.5, learning_rate=1e-4, tokens_per_s=100.0, epoch=0.1)
    record = parse_line(line)
    assert record["ftwiz"] == "progress" and record["step"] == 3 and record["loss"] == 2.5
    assert isinstance(record["time"], float)
    assert "\n" not in line


@pytest.mark.parametrize("prefix", ["", "[default0]:", "node1/r0 | ", "  "])
def test_parse_tolerates_prefixes(prefix):
    line = prefix + format_line("heartbeat", rank=1, step=7) + "\r\n"
    record = parse_line(line)
    assert record is not None and (record["ftwiz"], record["rank"], record["step"]) == ("heartbeat", 1, 7)


@pytest.mark.parametrize("line", [
    "", "plain text", "# size table", '{"other": 1}', '{"ftwiz": 3}', '{"ftwiz": "progress", "step": ', "[1, 2]",
    "W1122 torch/distributed ... Sending process 5 closing signal SIGTERM",
])
def test_parse_ignores_other_lines(line):
    assert parse_line(line) is None


def test_nan_and_inf_become_null():
    record = parse_line(format_line("progress", rank=0, step=1, loss=float("nan"), tokens_per_s=float("inf")))
    assert record["loss"] is None and record["tokens_per_s"] is None


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown protocol kind"):
        format_line("bogus", rank=0)


def test_emit_writes_one_flushed_line(capsys):
    emit("done", rank=2, status="ok")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and parse_line(out)["rank"] == 2


def test_documented_kinds_match():
    assert KINDS == {"started", "heartbeat", "progress", "allreduce", "checkpoint", "note", "done", "error"}


def test_package_uses_only_relative_imports_and_the_shipped_shared_modules():
    """The launcher ships agent/workloads as ``ftwiz_workloads`` to nodes without ftwiz or pydantic, with the ``shared``
    modules it imports beside it (``SHIPPED_SHARED``)."""
    from tui.launch.support import SHIPPED_SHARED

    shipped = {path.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for path in SHIPPED_SHARED}
    forbidden = {"agent", "shared", "tui", "pydantic", "bench", "tests"}
    for path in sorted(SOURCE.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            names = {alias.name for alias in node.names} if isinstance(node, ast.Import) else {node.module or ""}
            if names <= shipped:
                continue
            assert not roots & forbidden, f"{path.name}:{node.lineno} imports {roots & forbidden}: use relative imports"


def test_shipped_package_carries_the_shared_modules_under_their_own_names(tmp_path):
    """On a node the workloads import the protocol, the balance plan and the wire names as ``shared.*``, from the files
    shipped beside them, where ftwiz is not installed (``-I``: no site-packages, no PYTHONPATH, only the run dir)."""
    from tui.launch.support import SHIPPED_SHARED, workload_files

    files = workload_files()
    for path in SHIPPED_SHARED:
        assert files[path] == (REPO / path).read_bytes()
    assert not [name for name in files if "/_wire" in name or "/_balanceplan" in name], "no renamed copies"
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    code = ("import sys; sys.path.insert(0, '.'); import ftwiz_workloads.protocol as p, ftwiz_workloads.balance as b, shared; "
            f"assert shared.__file__.startswith({str(tmp_path)!r}), shared.__file__; "
            "assert b.plan_shares.__module__ == 'shared.balanceplan'; p.emit('progress', step=1)")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"ftwiz":"progress","step":1')


def test_the_shipped_shared_modules_import_only_the_standard_library_and_each_other():
    """What ships beside the workloads runs under the node's plain training interpreter: nothing else is there."""
    from tui.launch.support import SHIPPED_SHARED

    shipped = {path.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for path in SHIPPED_SHARED}
    for path in SHIPPED_SHARED:
        for node in ast.walk(ast.parse((REPO / path).read_text(), filename=path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: a relative import"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                ok = name in shipped or name.split(".")[0] in sys.stdlib_module_names or name == "__future__"
                assert ok, f"{path}:{node.lineno} imports {name}: ship it in SHIPPED_SHARED or keep it out"


def test_protocol_and_package_import_without_torch():
    """The controller may import the protocol; that must not drag torch in."""
    code = "import sys, agent.workloads, agent.workloads.protocol, agent.workloads.data; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
