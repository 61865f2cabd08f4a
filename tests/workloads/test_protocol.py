"""The line protocol (pure) and the shipping constraints of the workloads package."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from agent.workloads.protocol import KINDS, emit, format_line, parse_line
from shared.protocol import (
    RECORDS,
    Allreduce,
    Checkpoint,
    Done,
    Error,
    Heartbeat,
    Note,
    Progress,
    Started,
    make_record,
)
from tests.workloads.helpers import REPO, SOURCE

#: One record of each kind with every field set, as the workloads (and trainers' lines) fill them.
FULL = [
    Started(rank=1, local_rank=0, world_size=4, local_world_size=2, hostname="node1", backend="nccl", pid=1234,
            workload="sft", balance={"samples_per_step": 3, "micro_batch": 1}, time=1.5),
    Heartbeat(rank=3, step=12, compute_s=0.25, sync_s=0.5, time=2.0),
    Progress(rank=0, step=12, total_steps=100, loss=2.31, learning_rate=2e-4, tokens_per_s=5120.0, epoch=0.4, sync_s=0.71,
             time=3.0, source="tqdm", eta_s=60.0, elapsed_s=5.0, num_tokens=2048.0, tokens_per_s_per_gpu=1500.0, grad_norm=1.2),
    Allreduce(rank=0, size_bytes=1048576, world_size=2, iterations=20, time_us=812.5, algbw_gbps=1.29, busbw_gbps=1.29,
              correct=True, time=4.0),
    Checkpoint(rank=0, step=100, path="/work/ckpt/checkpoint-100", time=5.0),
    Note(rank=0, message="fsdp: shards", balance={"mode": "auto", "ranks": [{"rank": 0}]}, shard_params=10, shard_bytes=40,
         total_params=20, total_bytes=80, shard_trainable=5, fsdp_units=2, world_size=2, probe_logits=[0.5, -1.25], time=6.0),
    Done(rank=0, status="ok", adapter_path="/work/ckpt/final", step=100, peak_allocated_bytes=1 << 30,
         throughput={"tokens_per_s": 100.0, "steps": 3}, time=7.0),
    Error(rank=1, message="data/train.jsonl line 7: not valid JSON", time=8.0),
]


def test_every_kind_has_a_full_example():
    assert sorted(type(record).KIND for record in FULL) == sorted(KINDS) == sorted(RECORDS)


@pytest.mark.parametrize("record", FULL, ids=lambda record: record.KIND)
def test_every_kind_round_trips_with_every_field(record):
    line = format_line(record)
    assert "\n" not in line and line.startswith('{"ftwiz":"%s",' % record.KIND)
    assert parse_line(line) == record


@pytest.mark.parametrize("record", FULL, ids=lambda record: record.KIND)
def test_every_kind_round_trips_with_no_field_but_its_time(record):
    empty = type(record)(time=1.0)
    assert parse_line(format_line(empty)) == empty


def test_a_record_without_a_time_is_stamped_when_written():
    record = parse_line(format_line(Progress(rank=0, step=3)))
    assert isinstance(record, Progress) and isinstance(record.time, float) and record.step == 3


@pytest.mark.parametrize("prefix", ["", "[default0]:", "node1/r0 | ", "  "])
def test_parse_tolerates_prefixes(prefix):
    record = parse_line(prefix + format_line(Heartbeat(rank=1, step=7)) + "\r\n")
    assert isinstance(record, Heartbeat) and (record.rank, record.step) == (1, 7)


@pytest.mark.parametrize("line", [
    "", "plain text", "# size table", '{"other": 1}', '{"ftwiz": 3}', '{"ftwiz": "progress", "step": ', "[1, 2]",
    '{"ftwiz": "bogus", "rank": 0}', '{"ftwiz": "progress"} trailing words',
    "W1122 torch/distributed ... Sending process 5 closing signal SIGTERM",
])
def test_parse_ignores_other_lines_and_unknown_kinds(line):
    assert parse_line(line) is None


def test_a_field_of_the_wrong_type_reads_as_absent_and_unknown_keys_are_ignored():
    line = ('{"ftwiz": "progress", "rank": true, "step": "12", "total_steps": 10.0, "loss": "nan", "epoch": 1, '
            '"source": 3, "mine": {"a": 1}}')
    assert parse_line(line) == Progress(total_steps=10, epoch=1.0)
    assert parse_line('{"ftwiz": "done", "throughput": [1], "status": ["ok"], "step": 2.5}') == Done()
    assert parse_line('{"ftwiz": "allreduce", "correct": 1, "size_bytes": 1e3}') == Allreduce(size_bytes=1000)


def test_nan_and_inf_become_null():
    record = parse_line(format_line(Progress(rank=0, step=1, loss=float("nan"), tokens_per_s=float("inf"))))
    assert isinstance(record, Progress) and record.loss is None and record.tokens_per_s is None and record.step == 1


def test_a_kind_or_a_field_the_protocol_does_not_know_is_refused_when_made():
    with pytest.raises(ValueError, match="unknown protocol kind 'bogus'"):
        make_record("bogus", rank=0)
    with pytest.raises(ValueError, match="'heartbeat' has no field stepp"):
        make_record("heartbeat", rank=0, stepp=3)
    assert make_record("heartbeat", rank=0, step=3) == Heartbeat(rank=0, step=3)


def test_every_field_has_a_reader():
    """Each declared type of a record's fields has its reader in shared.protocol (a new type needs one)."""
    from dataclasses import fields

    from shared import protocol

    for cls in RECORDS.values():
        for f in fields(cls):
            assert str(f.type) in protocol._READERS, f"{cls.__name__}.{f.name}: {f.type}"


def test_emit_writes_one_flushed_line(capsys):
    emit("done", rank=2, status="ok")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and parse_line(out) == Done(rank=2, status="ok", time=parse_line(out).time)


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
    shipped beside them, where ftwiz is not installed (``-I -S``: no site-packages, no PYTHONPATH, only the run dir)."""
    from tui.launch.support import SHIPPED_SHARED, workload_files

    files = workload_files()
    for path in SHIPPED_SHARED:
        assert files[path] == (REPO / path).read_bytes()
    assert not [name for name in files if "/_wire" in name or "/_balanceplan" in name], "no renamed copies"
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    code = ("import sys; sys.path.insert(0, '.'); import ftwiz_workloads.protocol as p, ftwiz_workloads.balance as b, ftwiz_workloads.usercode, shared; "
            f"assert shared.__file__.startswith({str(tmp_path)!r}), shared.__file__; "
            "assert b.plan_shares.__module__ == 'shared.balanceplan'; p.emit('progress', step=1)")
    # -S too: the venv's editable install of ftwiz would otherwise find a shared module that was not shipped
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
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
