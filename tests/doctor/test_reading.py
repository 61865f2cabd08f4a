"""Reading real files safely: streamed logs in windows, what is not a regular file refused, hostile run.json
refused in one line, one bad record never hiding the others, and an honest kernel OOM lookup."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent.routers.kernel import lookup
from shared.config import FtwizConfig, NodeConfig
from tui.doctor import diagnose_files
from tui.doctor.cli import why_main
from tui.doctor.logs import read_log
from tui.launch.commands import attach
from tui.launch.options import RunOptions
from tui.runs.record import latest_run_id

_OOM = "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def test_a_big_log_keeps_windows_around_the_evidence_not_the_file(tmp_path):
    path = tmp_path / "node0.log"
    noise = "".join(f"{{'loss': 1.{i % 97:02d}, 'learning_rate': 2e-05, 'epoch': 0.{i}}}\n" for i in range(20_000))
    path.write_text(noise + _OOM + "\n" + noise)
    lines = read_log(path)
    assert len(lines) < 300  # head, tail and the window around the OOM, not 40 001 lines
    found = diagnose_files([path])
    assert found[0].cause == "oom.gpu" and found[0].evidence[0].line == 20_001 and found[0].rank == 3


def test_invalid_utf8_and_an_endless_line_are_fine(tmp_path):
    path = tmp_path / "node0.log"
    path.write_bytes(b"\xff\xfe bad bytes\n" + b"\r 3%|#" * 400_000 + b"\n" + b"x" * 300_000 + b"\n" + _OOM.encode() + b"\n")
    lines = read_log(path)
    assert max(len(line.text) for line in lines) <= 2000
    assert diagnose_files([path])[0].cause == "oom.gpu"


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, capsys, kind):
    path = tmp_path / "node0.log"
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes to it: reading would block forever
    elif kind == "directory":
        path.mkdir()
    else:
        path = Path("/dev/zero")  # endless
    started = time.monotonic()
    assert why_main(run_id=None, files=[str(path)], json_output=False) == 2
    assert time.monotonic() - started < 5
    said = capsys.readouterr().err
    assert str(path) in said and {"fifo": "a FIFO", "directory": "a directory", "device": "a device"}[kind] in said


_HOSTILE = {
    "a list": "[1, 2, 3]",
    "wrong types": json.dumps({"run_id": "r", "status": "failed", "nodes": "node0", "created_at": "yesterday"}),
    "deep nesting": "[" * 200_000 + "]" * 200_000,
    "deep nesting in a field": '{"run_id": "r", "config": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}",
    "not JSON": '{"run_id": "r", "status": ',
}


@pytest.mark.parametrize("name", list(_HOSTILE))
def test_a_hostile_run_json_is_one_line_and_exit_2_for_why_and_attach(tmp_path, monkeypatch, capsys, name):
    runs = tmp_path / "runs"
    (runs / "bad").mkdir(parents=True)
    (runs / "bad" / "run.json").write_text(_HOSTILE[name])
    (runs / "bad" / "node0.log").write_text(_OOM + "\n")
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    assert why_main(run_id="bad", files=None, json_output=False) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and "bad/run.json" in said and len(said) < 400, said
    config = FtwizConfig(nodes=[NodeConfig(name="node0", host="127.0.0.1")])
    assert attach(config, "bad", options=RunOptions(runs_dir=str(runs))) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and "bad/run.json" in said, said


def test_one_bad_record_never_hides_the_latest_good_run(tmp_path):
    runs = tmp_path / "runs"
    for run_id, created, text in (("20260101-000000-aaaa", 100.0, None), ("20260102-000000-bbbb", 200.0, None)):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "run.json").write_text(text or json.dumps({"run_id": run_id, "created_at": created, "status": "failed"}))
    for bad, text in _HOSTILE.items():
        folder = runs / f"20270101-{abs(hash(bad)) % 10**6:06d}-zzzz"
        folder.mkdir()
        (folder / "run.json").write_text(text)
    (runs / "20280101-000000-fifo").mkdir()
    os.mkfifo(runs / "20280101-000000-fifo" / "run.json")
    assert latest_run_id(runs) == "20260102-000000-bbbb"


def test_the_kernel_lookup_never_says_not_oom_when_it_could_not_read(tmp_path):
    kill = "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:221368kB"
    empty = tmp_path / "kmsg"
    empty.write_text("")
    # An empty kernel log (no CAP_SYSLOG in a container) and no journal: nothing is concluded.
    answer = lookup(4242, kmsg_path=str(empty), journal=[])
    assert answer.found is False and answer.error and "cannot confirm" in answer.error
    unreadable = lookup(4242, kmsg_path=str(tmp_path / "missing"), journal=[])
    assert unreadable.error and "cannot confirm" in unreadable.error
    # A record of the pid counts only near the kill's time (pids are reused).
    journal = [(1000.0, "systemd: started"), (5000.0, kill)]
    assert lookup(4242, kmsg_path=str(empty), journal=journal, at=5010.0).found is True
    far = lookup(4242, kmsg_path=str(empty), journal=journal, at=9000.0)
    assert far.found is False and far.error is None  # read, reaches back to the kill, nothing near it
    too_late = lookup(4242, kmsg_path=str(empty), journal=[(5000.0, kill)], at=1000.0)
    assert too_late.found is False and too_late.error and "begin after the kill" in too_late.error
    assert lookup(4243, kmsg_path=str(empty), journal=journal, at=5010.0).found is False
