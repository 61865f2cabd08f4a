"""Unit tests for user code: shipping (ignore rules, cap, manifest), the command's argv and environment."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from shared.config import FtwizConfig, JobConfig, NodeConfig
from tui.codeship import CodeDirError, collect_code, resolve_code_dir
from tui.launch.launchplan import build_launch_plan
from tui.launch.plan import build_plan, start_script

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_ignore_rules_and_manifest(tmp_path):
    root = _tree(tmp_path / "proj", {
        "train.py": b"print('hi')\n",
        "configs/a.yml": b"lr: 1\n",
        "data/big.bin": b"x" * 100,
        "data/keep.txt": b"keep",
        "notes.log": b"log",
        "sub/deep/notes.log": b"log",
        ".git/HEAD": b"ref",
        "pkg/__pycache__/m.cpython-311.pyc": b"\0",
        ".venv/bin/python": b"",
        "checkpoints/step1/model.bin": b"w",
        ".gitignore": b"# data stays on the nodes\ndata/*\n!data/keep.txt\n*.log\n/checkpoints/\n",
    })
    bundle = collect_code(root)
    assert sorted(bundle.paths) == [".gitignore", "configs/a.yml", "data/keep.txt", "train.py"]
    entry = next(e for e in bundle.manifest if e["path"] == "train.py")
    assert entry == {"path": "train.py", "bytes": 12, "sha256": hashlib.sha256(b"print('hi')\n").hexdigest()}
    record = bundle.record()
    assert record["sha256"] == bundle.sha256 and len(record["sha256"]) == 64 and record["bytes"] == bundle.total_bytes
    # The tree hash changes with any shipped byte, not with ignored ones.
    before = bundle.sha256
    (root / "notes.log").write_bytes(b"other")
    assert collect_code(root).sha256 == before
    (root / "train.py").write_bytes(b"print('changed')\n")
    assert collect_code(root).sha256 != before


def test_over_the_cap_names_the_biggest_files_and_the_fix(tmp_path):
    root = _tree(tmp_path / "proj", {"train.py": b"pass\n"})
    with open(root / "weights.safetensors", "wb") as fh:
        fh.truncate(5_000_000)  # sparse: costs no disk
    with pytest.raises(CodeDirError) as caught:
        collect_code(root, max_bytes=1_000_000)
    message = str(caught.value)
    assert "weights.safetensors (5.0 MB)" in message and "over the 1.0 MB cap" in message
    assert ".ftwizignore" in message and 'code_dir = ""' in message


def test_only_the_tree_ships_links_out_and_special_files_are_refused_by_name(tmp_path):
    """Issue 18, finding 3: a link to a credentials file outside code_dir, a link to /proc/self/environ, a FIFO
    and a socket are each named in the refusal; a link to a file inside the tree ships that file's bytes."""
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = hunter2\n")
    root = _tree(tmp_path / "proj", {"train.py": b"pass\n", "conf/base.yml": b"lr: 1\n"})
    (root / "creds").symlink_to(secret)
    (root / "env").symlink_to("/proc/self/environ")
    (root / "same.yml").symlink_to(root / "conf" / "base.yml")
    os.mkfifo(root / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(root)  # a relative bind: tmp_path may be longer than a socket path may be
    try:
        listener.bind("sock")
    finally:
        os.chdir(here)
    try:
        with pytest.raises(CodeDirError) as caught:
            collect_code(root)
    finally:
        listener.close()
    message = str(caught.value)
    assert f"creds (a link to {secret}, outside code_dir)" in message and "env (a link to /proc/" in message
    assert "pipe (a FIFO (named pipe))" in message and "sock (a socket)" in message
    assert "same.yml" not in message and ".ftwizignore" in message
    # Ignored, they are no longer in the way; the in-tree link ships the bytes it points at.
    (root / ".ftwizignore").write_text("creds\nenv\npipe\nsock\n")
    bundle = collect_code(root)
    assert sorted(bundle.paths) == [".ftwizignore", "conf/base.yml", "same.yml", "train.py"]
    assert {e["path"]: e["bytes"] for e in bundle.manifest}["same.yml"] == len(b"lr: 1\n")


def test_the_cap_counts_bytes_read_not_what_stat_says(tmp_path):
    """/proc files say size 0 and hold bytes (as /proc/self/environ did): the cap counts what was read."""
    root = Path("/proc/sys/kernel/random")  # boot_id, uuid, poolsize, ...: regular files of stat size 0
    assert all(os.stat(p).st_size == 0 for p in root.iterdir())
    with pytest.raises(CodeDirError, match="more to ship than its files' sizes said, over the 0.0 MB cap"):
        collect_code(root, max_bytes=40)
    assert collect_code(root, max_bytes=4096).total_bytes > 40


@pytest.mark.timeout(60)  # the hand-written matcher backtracked for hours on these; RE2 takes microseconds
def test_a_pathological_ignore_pattern_is_matched_in_linear_time(tmp_path):
    """Issue 18, finding 7: ``**/`` repeated and ``*a*a*…b`` took seconds per path in the hand-written matcher."""
    root = _tree(tmp_path / "proj", {"a" * 40: b"x", "/".join(["d"] * 20) + "/f": b"y", "keep.py": b"z"})
    (root / ".gitignore").write_text("*a" * 25 + "b\n" + "**/" * 40 + "nothing\n")
    assert sorted(collect_code(root).paths) == sorted([".gitignore", "/".join(["d"] * 20) + "/f", "a" * 40, "keep.py"])


def test_a_bad_ignore_line_is_named_with_its_file_and_line(tmp_path):
    root = _tree(tmp_path / "proj", {"train.py": b"pass\n", ".ftwizignore": b"data/\n!\n"})
    with pytest.raises(CodeDirError, match=r"\.ftwizignore:2: '!' is not a gitignore pattern"):
        collect_code(root)


def test_missing_code_dir_is_an_error_with_the_fix(tmp_path):
    with pytest.raises(CodeDirError, match="not a directory"):
        collect_code(tmp_path / "nope")
    assert resolve_code_dir("src", str(tmp_path)) == (tmp_path / "src").resolve()


def _config(**job) -> FtwizConfig:
    return FtwizConfig(nodes=[NodeConfig(name="n0", host="10.0.0.1", python="/opt/py"), NodeConfig(name="n1", host="10.0.0.2")],
                       job=JobConfig(**job))


def test_command_argv_env_and_start_script():
    config = _config(workload="command", command=["train.py", "--lr", "1e-4"], env={"WANDB_MODE": "offline"}, code_dir="")
    plans = build_plan(config, "r1", rundirs={"n0": "/w/runs/r1", "n1": "/w/runs/r1"})
    argv = plans[0].argv
    assert argv[-4:] == ["-m", "ftwiz_workloads.usercode", "--spec", "/w/runs/r1/job.json"]
    assert "--max-restarts=0" in argv and "--tee=3" in argv
    env = plans[1].env
    assert env["WANDB_MODE"] == "offline" and env["FTWIZ_RUN_ID"] == "r1" and env["OMP_NUM_THREADS"] == "1"
    assert "export WANDB_MODE=offline" in start_script(plans[0], "/w/runs/r1")
    sft = build_plan(_config(), "r1", rundirs={"n0": "/w", "n1": "/w"})
    assert sft[0].argv[-4:] == ["-m", "ftwiz_workloads", "--spec", "/w/job.json"] and "WANDB_MODE" not in sft[0].env


def test_the_launch_plan_ships_the_code_once_and_records_it(tmp_path):
    root = _tree(tmp_path / "proj", {"train.py": b"print(1)\n", "runs/old/x.log": b"old"})
    config = _config(workload="command", command=["train.py"], code_dir="proj")
    plan = build_launch_plan(config, run_id="r2", rundirs=dict.fromkeys(("n0", "n1"), "/w/runs/r2"), reports={}, network_env=None,
                             sharding=None, package={}, resume=False, output_dir="out", config_dir=str(tmp_path))
    assert plan.code is not None and plan.code.tar_path is not None
    assert not any(name.startswith("code/") for node in plan.nodes.values() for name in node.files)
    with tarfile.open(plan.code.tar_path) as tar:
        assert tar.getnames() == ["code/train.py"]
        assert tar.extractfile("code/train.py").read() == b"print(1)\n"  # type: ignore[union-attr]
    assert plan.payload("n0").tars == plan.payload("n1").tars == (plan.code.tar_path,), "one bundle, every node"
    code = plan.run_record["code"]
    assert code["root"] == str(root) and [f["path"] for f in code["files"]] == ["train.py"]
    assert json.loads(plan.nodes["n0"].files["job.json"])["command"] == ["train.py"]


def test_the_runner_runs_a_script_with_its_argv_and_exit_code(tmp_path):
    """The node-side runner (shipped with the workloads) runs the command as __main__ with its argv, from the code dir."""
    rundir = tmp_path / "run"
    (rundir / "code").mkdir(parents=True)
    (rundir / "code" / "train.py").write_text(
        "import os, sys\nprint('argv', sys.argv[1:], 'cwd', os.path.basename(os.getcwd()), __name__)\n"
        "print('step 3/5 loss 0.25', flush=True)\nsys.exit(3)\n")
    spec = {"command": ["train.py", "--lr", "1e-4"], "code_dir": ".", "workdir": str(tmp_path), "progress_regex": r"step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>[0-9.]+)"}
    (rundir / "job.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "agent.workloads.usercode", "--spec", str(rundir / "job.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "RANK": "1"}, check=False)
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith('{"ftwiz":"started","rank":1')
    assert lines[1] == "argv ['--lr', '1e-4'] cwd code __main__"
    assert lines[2] == "step 3/5 loss 0.25"
    progress = json.loads(lines[3])
    assert (progress["ftwiz"], progress["step"], progress["total_steps"], progress["loss"]) == ("progress", 3, 5, 0.25)


def test_the_users_own_shared_package_imports_as_theirs_beside_the_shipped_one(tmp_path):
    """The workloads import ftwiz's ``shared`` modules (shipped beside them); a ``shared`` package of the user's own code
    is still the one their script imports."""
    from tui.launch.support import workload_files

    rundir = tmp_path / "run"
    for name, data in workload_files().items():
        (rundir / name).parent.mkdir(parents=True, exist_ok=True)
        (rundir / name).write_bytes(data)
    (rundir / "code" / "shared").mkdir(parents=True)
    (rundir / "code" / "shared" / "__init__.py").write_text("")
    (rundir / "code" / "shared" / "mine.py").write_text("WHO = 'the user'\n")
    (rundir / "code" / "train.py").write_text("from shared.mine import WHO\nprint(WHO, flush=True)\n")
    (rundir / "job.json").write_text(json.dumps({"command": ["train.py"], "code_dir": ".", "workdir": str(tmp_path)}))
    env = {**os.environ, "RANK": "0", "PYTHONPATH": str(rundir)}
    done = subprocess.run([sys.executable, "-m", "ftwiz_workloads.usercode", "--spec", str(rundir / "job.json")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["the user"]


def test_the_runner_leaves_after_the_scripts_atexit_handlers_and_waits_for_its_threads(tmp_path):
    """The runner leaves with ``os._exit`` (no interpreter teardown: a gloo thread there turned a rank's error into
    SIGABRT), but only after what a normal exit does for the script: its atexit handlers, its unflushed output, and
    a non-daemon thread of its own still running (then Python's normal exit waits for it)."""
    rundir = tmp_path / "run"
    (rundir / "code").mkdir(parents=True)
    (rundir / "code" / "train.py").write_text(
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "if '--thread' in sys.argv:\n"
        "    threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
        "sys.stdout.write('unflushed tail')\n"
        "raise RuntimeError('boom')\n")
    (rundir / "job.json").write_text(json.dumps({"command": ["train.py"], "code_dir": ".", "workdir": str(tmp_path)}))
    for argv, thread in (([], False), (["--thread"], True)):
        spec = json.loads((rundir / "job.json").read_text()) | {"command": ["train.py", *argv]}
        (rundir / "job.json").write_text(json.dumps(spec))
        done = subprocess.run([sys.executable, "-m", "agent.workloads.usercode", "--spec", str(rundir / "job.json")], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1, done.stderr
        assert "RuntimeError: boom" in done.stderr and "unflushed tail" in done.stdout and "atexit ran" in done.stdout
        assert ("thread done" in done.stdout) == thread, done.stdout


def test_the_runner_names_a_missing_script(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({"command": ["nope.py"], "code_dir": "", "workdir": str(tmp_path)}))
    done = subprocess.run([sys.executable, "-m", "agent.workloads.usercode", "--spec", str(tmp_path / "job.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert re.search(r'"ftwiz":"error".*nope.py not found', done.stdout)


def test_llamafactory_tail_turns_records_into_progress_lines(tmp_path):
    """The node-side tail of trainer_log.jsonl (record quoted from hiyouga/LlamaFactory#4350)."""
    import io
    import threading

    from agent.workloads.usercode import tail_trainer_log, trainer_log_path

    yaml = tmp_path / "x.yaml"
    yaml.write_text(f"stage: sft\noutput_dir: {tmp_path}/saves/lora\n")
    path = trainer_log_path([str(yaml)], "fallback")
    assert path == f"{tmp_path}/saves/lora/trainer_log.jsonl"
    Path(path).parent.mkdir(parents=True)
    out, stop = io.StringIO(), threading.Event()
    worker = threading.Thread(target=tail_trainer_log, args=(path, out), kwargs={"stop": stop})
    worker.start()
    Path(path).write_text('{"current_steps": 45, "total_steps": 82, "loss": 0.5613, "learning_rate": 6.496815614866792e-06, '
                          '"epoch": 0.5462822458270106, "percentage": 54.88, "elapsed_time": "0:29:15", "remaining_time": "0:24:03"}\n')
    deadline = 60.0
    import time
    start = time.monotonic()
    while '"step":45' not in out.getvalue() and time.monotonic() - start < deadline:
        time.sleep(0.1)
    stop.set()
    worker.join(10)
    line = json.loads(out.getvalue().splitlines()[0])
    assert (line["ftwiz"], line["step"], line["total_steps"], line["loss"]) == ("progress", 45, 82, 0.5613)


def test_code_dir_is_relative_to_the_config_file(tmp_path):
    from tui.codeship import anchor_code_dir

    job = JobConfig(workload="command", command=["train.py"], code_dir="src")
    anchor_code_dir(job, tmp_path / "proj" / "ftwiz.toml")
    assert job.code_dir == str((tmp_path / "proj" / "src").resolve())
    kept = JobConfig(workload="command", command=["train.py"], code_dir="")
    anchor_code_dir(kept, tmp_path / "ftwiz.toml")
    assert kept.code_dir == ""


def test_progress_regex_tee_ends_a_line_at_carriage_return_and_caps_the_partial():
    """tqdm redraws with ``\r`` only (no newline when not a terminal): each update is a line, the buffer stays small,
    and a burst of redraws is matched once per interval (the latest update), the last one when the command ends."""
    import io

    from agent.workloads.usercode import PARTIAL_CAP, RegexTee

    now = [0]
    out = io.StringIO()
    tee = RegexTee(out, re.compile(r"(?P<step>\d+)/(?P<total>\d+) \[loss (?P<loss>[0-9.]+)\]"), rank=0, clock=lambda: now[0],
                   redraw_every_s=10)

    def progress() -> list[dict]:
        return [json.loads(line[line.index('{"ftwiz"'):]) for line in out.getvalue().split("\n") if '{"ftwiz":"progress"' in line]

    for step in range(1, 16001):
        now[0] = step  # one redraw a second, one looked at every 10 s: one in ten is matched
        tee.write(f"\r {step * 100 // 16000:3d}%|##  | {step}/16000 [loss 0.{step % 10}]")
        assert len(tee._partial) <= PARTIAL_CAP
    steps = [p["step"] for p in progress()]
    assert steps == list(range(10, 16000, 10)) and progress()[-1]["total_steps"] == 16000
    tee.finish()  # the command ended: the update still held is matched
    assert progress()[-1]["step"] == 15999
    tee.write("x" * (3 * PARTIAL_CAP))  # one endless line: only its tail is kept
    assert len(tee._partial) == PARTIAL_CAP
    tee.write(" 5/9 [loss 0.5]\n")  # a \n-ended line is matched at once
    assert progress()[-1]["step"] == 5
    assert "16000/16000 [loss 0.0]" in out.getvalue()  # everything written still reaches the log


def _members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_a_bundle_prebuilt_while_the_checklist_runs_is_taken_over_only_for_the_same_tree(tmp_path):
    """``ftwiz --launch`` builds the code's tar while the checklist runs; the run takes it over when the tree is what it
    was, rebuilds it when a file changed meanwhile, and a launch that does not go ahead drops it."""
    from tui import codeship

    root = _tree(tmp_path / "proj", {"train.py": b"print('v1')\n", "lib/util.py": b"X = 1\n"})
    codeship.prebuild(root)
    same = codeship.bundle_for_run("20260101-000000-aaaa", root)
    assert same.tar_path is not None and same.tar_path.name == "code.tar" and "ftwiz-code-2026" not in str(same.tar_path)
    assert _members(same.tar_path) == {"code/train.py": b"print('v1')\n", "code/lib/util.py": b"X = 1\n"}

    assert codeship.prebuild(root).wait(60)
    (root / "train.py").write_bytes(b"print('v2, edited after the code was bundled')\n")
    changed = codeship.bundle_for_run("20260101-000000-bbbb", root)
    assert "ftwiz-code-20260101-000000-bbbb" in str(changed.tar_path)  # built for the run, not taken over
    assert _members(changed.tar_path)["code/train.py"].startswith(b"print('v2")
    assert changed.sha256 != same.sha256

    assert codeship.prebuild(root).wait(60)
    dropped = codeship._PREBUILT[str(root)].bundle
    codeship.discard_prebuilt()
    assert dropped is not None and dropped.tar_path is not None and not dropped.tar_path.exists()
    rebuilt = codeship.bundle_for_run("20260101-000000-cccc", root)
    assert "ftwiz-code-20260101-000000-cccc" in str(rebuilt.tar_path)


def test_a_tree_that_cannot_ship_is_refused_by_the_run_as_before_prebuild(tmp_path):
    from tui import codeship

    root = _tree(tmp_path / "proj", {"train.py": b"x" * 2000})
    codeship.prebuild(root, max_bytes=1000)
    with pytest.raises(CodeDirError, match="train.py"):
        codeship.bundle_for_run("20260101-000000-dddd", root, max_bytes=1000)


def test_a_rank_and_the_doctor_name_where_code_raised_alike(tmp_path, capsys, monkeypatch):
    """A rank's ``error`` line and the doctor's reading of the traceback name the same place (``file:line in func``,
    the innermost frame of the user's own code), whichever of the two the doctor reads first."""
    import runpy

    from agent.workloads.usercode import report_exception
    from shared.protocol import parse_line
    from tui.doctor import diagnose_files

    script = tmp_path / "train.py"
    script.write_text("import statistics\n\ndef check_batch(losses):\n    return statistics.mean(losses)\n\ncheck_batch([])\n")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    try:
        runpy.run_path(str(script))
    except ValueError as error:  # statistics.StatisticsError
        report_exception(error)
    out, err = capsys.readouterr()
    error_line = next(line for line in out.splitlines() if '"error"' in line)
    record = parse_line(error_line)
    # raised inside the standard library: the user's frame is named, not statistics.py's
    assert record.message.endswith(" at train.py:4 in check_batch"), record
    from_traceback = tmp_path / "node0.log"
    from_traceback.write_text("".join(f"node0/2 | {line}\n" for line in err.splitlines()))
    from_error_line = tmp_path / "node1.log"
    from_error_line.write_text(f"node1/2 | {error_line}\n")
    for log in (from_traceback, from_error_line):
        first = diagnose_files([log])[0]
        assert first.cause == "code.error" and "train.py:4 in check_batch" in first.explanation, (log.name, first)


def test_a_script_that_does_not_parse_is_named_by_its_own_file_and_line(tmp_path, capsys, monkeypatch):
    """A SyntaxError is raised before the script runs (no frame of it): its file and line are the place, not the runner's."""
    from agent.workloads.usercode import run_command
    from shared.protocol import parse_line

    (tmp_path / "train.py").write_text("import os\n\ndef main(:\n    pass\n")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [name for name in sys.modules if name == "shared" or name.startswith("shared.")]:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # the runner forgets them before the script: put back
    assert run_command([str(tmp_path / "train.py")], str(tmp_path)) == 1
    record = parse_line(next(line for line in capsys.readouterr().out.splitlines() if '"error"' in line))
    assert record.message.startswith("SyntaxError: ") and record.message.endswith(" at train.py:3"), record
