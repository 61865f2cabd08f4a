"""The user's own code on namespace nodes: real sshd, real torchrun, gloo on CPU (issue 9).

The scripts in ``tests/launch/userscripts/`` are written as a user would (no ftwiz imports). Each test
checks the guarantee itself: exit codes, per-node logs, the progress the controller derived from what the
script printed, and, under faults, that every process carrying the run's ``FTWIZ_RUN_ID`` is gone.
"""

from __future__ import annotations

import io
import json
import stat
import threading
import time
from pathlib import Path

import pytest

from tests.launch.conftest import RunThread, make_run, run_pids, wait_until
from tui.launch.commands import HeadlessPrinter
from tui.launch.run import LaunchError, RunOptions

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parent / "userscripts"
REGEX = r"step (?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[0-9.]+)"


def _ddp_config(cluster, *args: str, **job):
    config = cluster.config(workload="command", command=["ddp_loop.py", *args], code_dir=str(SCRIPTS), progress_regex=REGEX,
                            env={"FTWIZ_TEST_MARK": "user-env"}, **job)
    for node in config.nodes:
        node.gpus = 1
    return config


def test_ddp_loop_on_three_nodes_ships_the_code_and_shows_its_progress(cluster3, tmp_path):
    config = _ddp_config(cluster3, "--steps", "10", "--sleep", "0.3")
    config.job.env["HF_TOKEN"] = "hf_cluster_secret_0123"
    run = make_run(config, tmp_path)
    watched = RunThread(run).start()
    result = watched.join(240)
    assert result.status == "succeeded" and result.exit_code == 0, (result, watched.notes())

    snap = run.progress.snapshot
    assert (snap.step, snap.total_steps) == (10, 10) and snap.loss is not None and snap.world_size == 3
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    code = record["code"]
    shipped = {f["path"]: f for f in code["files"]}
    assert "ddp_loop.py" in shipped and len(code["sha256"]) == 64
    assert shipped["ddp_loop.py"]["bytes"] == (SCRIPTS / "ddp_loop.py").stat().st_size
    assert sorted(record["ranks"]) == ["0", "1", "2"]
    for name in ("node0", "node1", "node2"):
        node = record["nodes"][name]
        assert node["exit"] == "0" and node["env"]["FTWIZ_TEST_MARK"] == "user-env"
        assert "ftwiz_workloads.usercode" in node["command"]
        log = (tmp_path / "runs" / run.run_id / f"{name}.log").read_text()
        assert f"{name}/" in log and "started" in log
        # The code ran from the shipped copy in the node's run dir.
        assert (Path(node["rundir"]) / "code" / "ddp_loop.py").read_bytes() == (SCRIPTS / "ddp_loop.py").read_bytes()
        # Issue 18, finding 4: written over SSH, the node's run dir is 0700 and what holds the token 0600.
        assert stat.S_IMODE(Path(node["rundir"]).stat().st_mode) == 0o700
        for private in ("job.json", f"{name}.sh", f"{name}.log", f"{name}.exit"):
            assert stat.S_IMODE((Path(node["rundir"]) / private).stat().st_mode) == 0o600, private
        assert "hf_cluster_secret_0123" in (Path(node["rundir"]) / "job.json").read_text() and node["env"]["HF_TOKEN"] == "***"
    rank0_node = record["ranks"]["0"]["node"]
    assert (Path(record["nodes"][rank0_node]["rundir"]) / "code" / "out" / "model.pt").is_file()
    assert "step 10/10" in (tmp_path / "runs" / run.run_id / f"{rank0_node}.log").read_text()
    assert "hf_cluster_secret_0123" not in (tmp_path / "runs" / run.run_id / "run.json").read_text()
    assert not run_pids(run.run_id)


def test_a_script_raising_on_rank_2_stops_every_rank_within_10s(cluster3, tmp_path):
    run = make_run(_ddp_config(cluster3, "--steps", "400", "--sleep", "0.2", "--fail-rank", "2", "--fail-step", "6"), tmp_path)
    watched = RunThread(run).start()
    raised = wait_until(lambda: any("simulated data error" in line.text for line in watched.lines()) or watched.finished_at, 240)
    raised_at = time.monotonic()
    assert raised, watched.notes()
    gone = wait_until(lambda: not run_pids(run.run_id), 10)
    elapsed = time.monotonic() - raised_at
    result = watched.join(60)
    assert gone, f"still running {elapsed:.1f} s after rank 2 raised: {run_pids(run.run_id)}"
    assert result.status == "failed" and result.exit_code != 0
    assert result.failed_rank == 2, result
    assert result.failed_node == run.progress.ranks[2].node
    assert any("RuntimeError: simulated data error on rank 2" in line for line in result.last_lines), result.last_lines


def test_a_rank_sleeping_before_the_first_collective_is_a_stall_with_stacks(cluster3, tmp_path):
    config = _ddp_config(cluster3, "--steps", "400", "--hang-rank", "1", stall_timeout_s=20, first_step_grace_s=20)
    run = make_run(config, tmp_path, options=RunOptions(dump_wait_s=2.0))
    watched = RunThread(run).start()
    assert wait_until(lambda: len(run.progress.ranks) == 3 or watched.finished_at, 240) and not watched.finished_at, watched.notes()
    all_started = time.monotonic()
    result = watched.join(240)
    elapsed = time.monotonic() - all_started
    assert result.status == "failed" and "stall" in result.reason, result
    assert not run_pids(run.run_id)
    # Caught by the stall window (20 s), not at the process-group timeout (1800 s under HF defaults).
    print(f"hang in rank 1 before the first collective -> stopped {elapsed:.1f} s after every rank started")
    assert elapsed < 1800, f"took {elapsed:.0f} s"
    log = "\n".join((tmp_path / "runs" / run.run_id / f"{n}.log").read_text() for n in ("node0", "node1", "node2"))
    hung_node = run.progress.ranks[1].node
    hung_log = (tmp_path / "runs" / run.run_id / f"{hung_node}.log").read_text()
    assert "most recent call first" in log
    assert f"{hung_node}/1 | " in hung_log and "ddp_loop.py" in hung_log and "in main" in hung_log


def test_code_dir_over_the_cap_is_refused_before_anything_starts(cluster3, tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('never runs')\n")
    with open(code / "model.safetensors", "wb") as fh:
        fh.truncate(80 * 1024 * 1024)  # sparse: over the 64 MiB cap without using the disk
    config = cluster3.config(workload="command", command=["train.py"], code_dir=str(code))
    run = make_run(config, tmp_path)
    with pytest.raises(LaunchError) as caught:
        run.launch()
    text = str(caught.value)
    assert "model.safetensors (83.9 MB)" in text and "over the 67.1 MB cap" in text and ".ftwizignore" in text
    assert not run_pids(run.run_id)
    for node in cluster3.nodes:
        assert not list(Path(node.workdir).glob(f"runs/{run.run_id}/*.pgid"))


@pytest.fixture(scope="module")
def tiny(tiny_assets, tmp_path_factory):
    """The tiny Llama (shared with the SFT tests) and a JSONL of ``{"text"}`` records, from the workloads' generator."""
    import subprocess
    import sys

    from tests.launch.conftest import REPO

    base = tmp_path_factory.mktemp("usercode-data")
    base.chmod(0o755)
    data = base / "train.jsonl"
    argv = [sys.executable, "-m", "agent.workloads.tiny", "dataset", str(data), "--records", "120", "--formats", "text"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"model": tiny_assets["model"], "data": data}


def _trainer_run(cluster, tmp_path, script: str, tiny, steps: int) -> tuple:
    config = cluster.config(workload="command", code_dir=str(SCRIPTS), requires=["transformers"],
                            command=[script, "--model", str(tiny["model"]), "--data", str(tiny["data"]), "--max-steps", str(steps)],
                            env={"TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets")})
    config.nodes = config.nodes[:2]
    for node in config.nodes:
        node.gpus = 1
    run = make_run(config, tmp_path)
    out = io.StringIO()
    run.subscribe(HeadlessPrinter(out=out, err=io.StringIO()))
    watched = RunThread(run).start()
    result = watched.join(420)
    return run, watched, result, out.getvalue()


@pytest.mark.parametrize("script", ["hf_trainer.py", "trl_sft.py"])
def test_trainer_scripts_show_step_loss_and_eta_from_their_own_output(cluster3, tmp_path, tiny, script):
    # TRL runs long enough for tokens/s (its bar's elapsed time has whole-second resolution: at least a
    # second of training, also on an idle machine where a step of the tiny model takes a few milliseconds).
    steps = 96 if script == "trl_sft.py" else 8
    run, watched, result, printed = _trainer_run(cluster3, tmp_path, script, tiny, steps)
    assert result.status == "succeeded" and result.exit_code == 0, (result, watched.notes(), printed[-3000:])
    snaps = [e.progress for e in watched.events if type(e).__name__ == "ProgressChanged"]
    final = run.progress.snapshot
    assert (final.step, final.total_steps) == (steps, steps) and final.loss is not None and final.learning_rate is not None
    assert any(s.eta_s is not None for s in snaps), "no ETA was ever shown"
    progress_lines = [line for line in printed.splitlines() if line.startswith("progress | ")]
    assert any(f"step {steps}/{steps}" in line and "loss" in line for line in progress_lines), printed[-3000:]
    # The training bar becomes progress lines; other bars (data mapping, weight loading) print once, not per update.
    printed_bars = [line for line in printed.splitlines() if "%|" in line and not line.startswith("progress")]
    assert not any(line.startswith(("node0/0 |  ", "node1/0 |  ")) and "it/s]" in line for line in printed_bars), printed_bars
    # The node-side logs hold every update torchrun's tee wrote; the printer and the run's own log files
    # (runs/<id>/<node>.log) keep one line per bar run instead (transformers#28683).
    nodes = run.record.data["nodes"]
    raw_bars = [line for n in ("node0", "node1") for line in Path(nodes[n]["node_log"]).read_text(errors="replace").splitlines() if "%|" in line]
    logged_bars = [line for n in ("node0", "node1") for line in (tmp_path / "runs" / run.run_id / f"{n}.log").read_text().splitlines() if "%|" in line]
    assert len(printed_bars) < len(raw_bars) / 2, (len(printed_bars), len(raw_bars))
    # The run log keeps each bar's last update before another line of the same rank: fewer lines, never more
    # (a trainer that logs every step interrupts its bar every step, so that is all the collapsing there is).
    assert len(logged_bars) < len(raw_bars), (len(logged_bars), len(raw_bars))
    if script == "trl_sft.py":
        assert any(s.tokens_per_s for s in snaps), "TRL's num_tokens gave no tokens/s"
    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    rank0 = record["ranks"]["0"]["node"]
    out = Path(record["nodes"][rank0]["rundir"]) / "code" / "out"
    assert (out / f"checkpoint-{steps}").is_dir() and (out / "final").is_dir()
    (tmp_path / "printed.txt").write_text(printed)
    print(f"--- headless printer, {script} ---\n" + "\n".join(progress_lines[-6:]))


def test_a_missing_required_package_fails_the_checklist_and_nothing_starts(cluster3, tmp_path, capsys):
    from tui.launch import commands

    config = _ddp_config(cluster3, "--steps", "3", requires=["no-such-package", "torch"])
    code = commands.launch(config, yes=True, detach=False, resume=False, force=False, options=RunOptions(runs_dir=tmp_path / "runs"))
    err = capsys.readouterr().err
    assert code == commands.EXIT_FAILED
    for node in ("node0", "node1", "node2"):
        assert f"on {node}: {cluster3.training_python} -m pip install no-such-package" in err, err[-3000:]
    assert "no-such-package missing" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/run.json"))


def test_a_detached_user_script_is_attached_with_its_progress_then_stopped(cluster3, tmp_path, monkeypatch):
    from tui.launch import commands
    from tui.runs.record import latest_run_id

    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    config = _ddp_config(cluster3, "--steps", "100000", "--sleep", "0.2")
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    assert commands.launch(config, yes=True, detach=True, resume=False, force=False, checklist=False, printer=quiet) == 0
    run_id = latest_run_id(runs)
    record = json.loads((runs / run_id / "run.json").read_text())
    assert record["status"] == "detached" and record["code"]["files"]
    node_logs = [Path(n["node_log"]) for n in record["nodes"].values()]
    # Nobody watches; the script goes on (its progress lines land in the node-side log of rank 0's node).
    assert wait_until(lambda: any(p.is_file() and p.read_text().count('"progress"') >= 3 for p in node_logs), 180), node_logs
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []
    attached = threading.Thread(target=lambda: codes.append(commands.attach(config, None, printer=commands.HeadlessPrinter(out, err))), daemon=True)
    attached.start()
    try:
        replayed = wait_until(lambda: all(f"started: rank {r} of 3" in out.getvalue() for r in range(3)) and "progress | step " in out.getvalue(), 60)
        assert replayed, out.getvalue()[-2000:]
    finally:
        stopped = commands.stop(config, run_id)
    assert stopped == 0
    attached.join(60)
    assert not attached.is_alive() and codes
    assert wait_until(lambda: not run_pids(run_id), 30), run_pids(run_id)


def test_balance_auto_gives_each_rank_of_your_code_its_share(cluster3, tmp_path):
    """balance = "auto" for your own code: the shares come from the compute probe's figures (given here as the
    checklist would hand them on: the namespace nodes share one CPU, so the checklist itself measures nothing),
    each rank's script reads its own from FTWIZ_* (two ranks on node0: resolved per local rank), and what each
    printed is what run.json's ``balance`` says of that rank."""
    from shared.computeplan import ProbeFigures

    config = cluster3.config(workload="command", command=["balanced_loop.py"], code_dir=str(SCRIPTS), balance="auto",
                             micro_batch_size=4, grad_accum_steps=2, progress_regex=REGEX)
    for node, count in zip(config.nodes, (2, 1, 1), strict=True):
        node.gpus = count
    figures = ProbeFigures({"node0": (2.0, 2.0), "node1": (1.0,), "node2": (0.5,)})
    run = make_run(config, tmp_path, compute=figures)
    watched = RunThread(run).start()
    result = watched.join(240)
    assert result.status == "succeeded" and result.exit_code == 0, (result, watched.notes())

    record = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    balance = record["balance"]
    assert balance["mode"] == "auto" and balance["global_batch"] == 4 * 2 * 4 and "compute probe" in balance["why"]
    planned = {(r["node"], r["local_rank"]): r for r in balance["ranks"]}
    assert sorted(planned) == [("node0", 0), ("node0", 1), ("node1", 0), ("node2", 0)]
    assert sum(r["samples_per_step"] for r in planned.values()) == 32
    assert planned[("node0", 0)]["samples_per_step"] > planned[("node2", 0)]["samples_per_step"]  # not the uniform 8 each
    assert any("balance auto: samples per step" in note for note in watched.notes())
    read = {}
    for name in ("node0", "node1", "node2"):
        for line in (tmp_path / "runs" / run.run_id / f"{name}.log").read_text().splitlines():
            if "balance-env " in line:
                fields = dict(part.split("=", 1) for part in line.split("balance-env ", 1)[1].split())
                read[(fields["node"], int(fields["local_rank"]))] = fields
    assert sorted(read) == sorted(planned), read
    for key, row in planned.items():
        got = read[key]
        assert int(got["rank"]) == row["rank"], (key, got, row)  # the global rank, named in run.json when the rank started
        assert (got["mode"], int(got["global"]), int(got["samples"]), int(got["micro"]), int(got["accum"])) == \
            ("auto", 32, row["samples_per_step"], row["micro_batch"], row["accum"]), (key, got, row)
    assert not run_pids(run.run_id)
