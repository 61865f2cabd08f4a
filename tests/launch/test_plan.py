"""The per-node torchrun command, environment and start script (pure; no nodes needed)."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess

import pytest

from shared import nodewire
from shared.config import FtwizConfig, JobConfig, NodeConfig
from tui.jobshape import node_processes, threads_per_rank
from tui.launch.plan import build_plan, make_payload, quote_path, start_script


def _config(**kw) -> FtwizConfig:
    nodes = kw.pop("nodes", None) or [
        NodeConfig(name="a", host="10.0.0.1", gpus="all", python="/opt/venv/bin/python", workdir="~/ftwiz"),
        NodeConfig(name="b", host="10.0.0.2", gpus=[1, 3]),
        NodeConfig(name="c", host="10.0.0.3", gpus=2, workdir="/data/ftwiz runs"),
    ]
    return FtwizConfig(nodes=nodes, **kw)


def _plans(config, **kw):
    rundirs = {n.name: f"/abs/{n.name}/runs/r1" for n in config.nodes}
    return {p.node: p for p in build_plan(config, "r1", rundirs=rundirs, **kw)}


def _opt(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(values) == 1, argv
    return values[0]


def test_rendezvous_is_c10d_with_host_flags_and_local_addr():
    plans = _plans(_config())
    for name, plan in plans.items():
        argv = plan.argv
        assert argv[:3] == [plan.python, "-m", "torch.distributed.run"]
        assert _opt(argv, "nnodes") == "3"
        assert _opt(argv, "rdzv-backend") == "c10d"
        assert _opt(argv, "rdzv-endpoint") == "10.0.0.1:29500"
        assert _opt(argv, "rdzv-id") == "r1"
        assert _opt(argv, "local-addr") == plan.host
        assert _opt(argv, "rdzv-conf") == ("is_host=true" if name == "a" else "is_host=false")
        assert _opt(argv, "max-restarts") == "0"
        assert argv[-4:] == ["-m", "ftwiz_workloads", "--spec", f"/abs/{name}/runs/r1/job.json"]
    assert plans["a"].is_master and not plans["b"].is_master


def test_master_can_be_named_and_port_set():
    config = _config()
    config.cluster.master = "c"
    config.cluster.rendezvous_port = 31000
    plans = _plans(config)
    assert _opt(plans["a"].argv, "rdzv-endpoint") == "10.0.0.3:31000"
    assert _opt(plans["c"].argv, "rdzv-conf") == "is_host=true"
    assert plans["b"].env["MASTER_ADDR"] == "10.0.0.3" and plans["b"].env["MASTER_PORT"] == "31000"


def test_process_counts_follow_the_selected_gpus_heterogeneously():
    gpus = {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "c": [0, 1, 2]}
    plans = _plans(_config(), gpu_indices=gpus, cpu_cores={"a": 32, "b": 16})
    assert (_opt(plans["a"].argv, "nproc-per-node"), plans["a"].env["CUDA_VISIBLE_DEVICES"]) == ("4", "0,1,2,3")
    assert (_opt(plans["b"].argv, "nproc-per-node"), plans["b"].env["CUDA_VISIBLE_DEVICES"]) == ("2", "1,3")
    assert (_opt(plans["c"].argv, "nproc-per-node"), plans["c"].env["CUDA_VISIBLE_DEVICES"]) == ("2", "0,1")
    assert plans["a"].env["OMP_NUM_THREADS"] == "8" and plans["b"].env["OMP_NUM_THREADS"] == "8"
    assert plans["c"].env["OMP_NUM_THREADS"] == "1"  # no report: one thread, never oversubscribe


def test_nodes_on_one_host_share_its_cores():
    """Nodes whose agents report one kernel boot id (containers, network namespaces) split that host's cores."""
    gpus = {"a": [], "b": [], "c": []}
    plans = _plans(_config(), gpu_indices=gpus, cpu_cores={"a": 8, "b": 8, "c": 2}, machines={"a": "boot-1", "b": "boot-1", "c": "boot-2"})
    # a (one rank) and b (two, gpus = [1, 3]) on one host: its 8 cores over 3 ranks; c alone, 2 cores for 2 ranks
    assert [plans[name].env["OMP_NUM_THREADS"] for name in "abc"] == ["2", "2", "1"]
    alone = _plans(_config(), gpu_indices=gpus, cpu_cores={"a": 8, "b": 8, "c": 2})
    assert [alone[name].env["OMP_NUM_THREADS"] for name in "abc"] == ["8", "4", "1"]


@pytest.mark.parametrize(("ranks", "cores", "machines", "threads"), [
    ({"a": 1, "b": 1, "c": 1}, {"a": 2, "b": 2, "c": 2}, {"a": "m", "b": "m", "c": "m"}, {"a": 1, "b": 1, "c": 1}),
    ({"a": 1, "b": 1}, {"a": 16, "b": 16}, {"a": "m", "b": "m"}, {"a": 8, "b": 8}),
    ({"a": 2, "b": 1}, {"a": 12, "b": 12}, {"a": "m", "b": "m"}, {"a": 4, "b": 4}),
    ({"a": 1, "b": 1}, {"a": 16, "b": 16}, {"a": "m", "b": None}, {"a": 16, "b": 16}),  # b's host unknown: its own
    ({"a": 4}, {"a": None}, {}, {"a": 1}),  # cores unknown: one thread, never oversubscribe
    ({"a": 4}, {"a": 2}, {}, {"a": 1}),
])
def test_threads_per_rank(ranks, cores, machines, threads):
    assert threads_per_rank(ranks, cores, machines) == threads


def test_the_users_omp_num_threads_wins_over_the_cores_per_rank():
    """Nodes that share cores (containers, namespaces on one host) each report all of them: the user says less."""
    config = _config()
    config.nccl.env = {"OMP_NUM_THREADS": "1"}
    plans = _plans(config, cpu_cores={"a": 32, "b": 16})
    assert {plans[name].env["OMP_NUM_THREADS"] for name in ("a", "b", "c")} == {"1"}


@pytest.mark.parametrize(
    "gpus, reported, expected",
    [
        ("all", [], (1, None)),  # GPU-less node: one CPU process
        ("all", None, (1, None)),  # unknown: the same
        (3, [], (3, None)),  # a count on a GPU-less node: that many CPU processes
        (2, [0, 1, 2, 3], (2, "0,1")),
        (0, [0, 1], (1, "")),  # 0 hides the GPUs, one CPU process
        ([2], [], (1, "2")),
    ],
)
def test_node_processes(gpus, reported, expected):
    assert node_processes(NodeConfig(name="n", host="h", gpus=gpus), reported) == expected


@pytest.mark.parametrize("reported", [[], [0, 1, 2, 3], None])
def test_cpu_ranks_run_that_many_cpu_processes_with_the_gpus_hidden(reported):
    assert node_processes(NodeConfig(name="n", host="h", cpu_ranks=2), reported) == (2, "")


def test_environment_carries_run_tags_network_plan_and_nccl_env():
    config = _config()
    config.nccl.env = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^docker"}
    net = {n: {"NCCL_SOCKET_IFNAME": "=eth1", "GLOO_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": "1"} for n in "abc"}
    plans = _plans(config, network_env=net)
    env = plans["b"].env
    assert env["FTWIZ_RUN_ID"] == "r1" and env["FTWIZ_NODE"] == "b"
    assert env["PYTHONPATH"] == "/abs/b/runs/r1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["GLOO_SOCKET_IFNAME"] == "eth1" and env["NCCL_IB_DISABLE"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "^docker"  # [nccl].env wins over the plan, as in shared.netplan
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"


def test_bad_run_id_is_refused():
    with pytest.raises(ValueError, match="run id"):
        build_plan(_config(), "x; rm -rf /", rundirs={})


def test_quote_path_expands_home_only():
    assert quote_path("~/ftwiz") == '"$HOME"/ftwiz'
    assert quote_path("/a b/$(x)") == "'/a b/$(x)'"


def test_script_quotes_every_value_and_runs_in_sh(tmp_path):
    """Hostile values survive a real ``sh`` verbatim: nothing is interpolated."""
    evil = "$(touch PWNED) `touch PWNED2`; echo 'x' \"y\""
    config = _config(
        nodes=[NodeConfig(name="a", host="10.0.0.1", python="echo", workdir=str(tmp_path / "w d"))],
        job=JobConfig(),
    )
    config.nccl.env = {"EVIL": evil}
    (tmp_path / "w d").mkdir()
    rundir = str(tmp_path / "w d" / "runs" / "r1")
    plan = build_plan(config, "r1", rundirs={"a": rundir})[0]
    (tmp_path / "w d" / "runs" / "r1").mkdir(parents=True)
    script = start_script(plan, rundir)
    (tmp_path / "w d" / "runs" / "r1" / "a.sh").write_text(script + "\n")
    # Run the script the way the node would (without setsid's detachment, to wait for it).
    done = subprocess.run(["sh", "-c", f"cd {shlex.quote(rundir)} && sh a.sh; echo EVIL=\"$EVIL\""], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("PWNED*"))
    log = (tmp_path / "w d" / "runs" / "r1" / "a.log").read_text()
    assert "torch.distributed.run" in log  # `echo` stood in for python: argv arrived intact
    assert nodewire.parse_exit((tmp_path / "w d" / "runs" / "r1" / "a.exit").read_text()) == 0
    found = nodewire.parse_pgid((tmp_path / "w d" / "runs" / "r1" / "a.pgid").read_text())
    assert found is not None and found[1] is not None  # the group and its leader's start time


def _helper(*args: str, **kw) -> subprocess.Popen:
    import sys

    from tui.launch.nodecode import helper_argv

    return subprocess.Popen(helper_argv(sys.executable, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kw)


def test_node_helper_receives_the_job_and_starts_it_detached_on_go(tmp_path):
    import os
    import signal

    config = _config(nodes=[NodeConfig(name="a", host="10.0.0.1", python="sleep", workdir=str(tmp_path))])
    rundir = tmp_path / "runs" / "r1"
    rundir.mkdir(parents=True)
    plan = dataclasses.replace(build_plan(config, "r1", rundirs={"a": str(rundir)})[0], argv=["sleep", "30"])
    payload = make_payload({"a.sh": start_script(plan, str(rundir)).encode(), "pkg/x.py": b"X = 1\n"})
    helper = _helper("launch", "a", "1.0", cwd=rundir)
    try:
        assert helper.stdout.readline().decode().strip() == f"R {rundir}"
        helper.stdin.write(f"payload {len(payload)}\n".encode() + payload)
        helper.stdin.flush()
        assert helper.stdout.readline().strip() == b"U"
        assert (rundir / "pkg" / "x.py").read_text() == "X = 1\n"
        helper.stdin.write(b"go\n")
        helper.stdin.flush()
        frame = helper.stdout.readline().decode().split()
        assert frame[0] == "P"
        pgid = int(frame[1])
        try:
            assert os.getsid(pgid) == pgid  # its own session, so it outlives the SSH channel
        finally:
            os.killpg(pgid, signal.SIGKILL)
    finally:
        helper.kill()
        helper.wait(10)


def test_node_helper_starts_nothing_without_go(tmp_path):
    payload = make_payload({"a.sh": b"touch started\n"})
    helper = _helper("launch", "a", "1.0", cwd=tmp_path)
    out, _ = helper.communicate(f"payload {len(payload)}\n".encode() + payload, timeout=20)
    assert out.decode().splitlines()[-1] == "X aborted"
    assert not (tmp_path / "started").exists()


def test_node_helper_refuses_a_payload_escaping_the_run_directory(tmp_path):
    payload = make_payload({"../evil.sh": b"x"})
    helper = _helper("launch", "a", "1.0", cwd=tmp_path)
    out, _ = helper.communicate(f"payload {len(payload)}\n".encode() + payload + b"go\n", timeout=20)
    assert out.decode().splitlines()[-1] == "X bad-payload"
    assert not (tmp_path.parent / "evil.sh").exists()


def test_node_helper_unpacks_its_files_then_the_shared_code_tar_private_to_the_user(tmp_path):
    """One code tar per run, streamed after each node's own files; everything lands 0600 (umask 077 too)."""
    import os
    import stat

    from tui.codeship import collect_code
    from tui.launch.plan import Payload, send_payload

    code = tmp_path / "code-src"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "big.bin").write_bytes(os.urandom(3 << 20))  # several send chunks
    bundle = collect_code(code, tar_path=tmp_path / "code.tar")
    rundir = tmp_path / "run"
    rundir.mkdir()
    helper = _helper("launch", "a", "1.0", cwd=rundir)
    try:
        assert helper.stdout.readline().decode().strip() == f"R {rundir}"
        sent: list[bytes] = []

        def send(data: bytes) -> None:
            sent.append(data)
            helper.stdin.write(data)
            helper.stdin.flush()

        send_payload(send, Payload({"job.json": b'{"env": {"HF_TOKEN": "x"}}', "a.sh": b"exit 0\n"}, (bundle.tar_path,)))
        assert max(len(piece) for piece in sent[1:]) <= 1 << 20  # streamed from disk in chunks
        assert helper.stdout.readline().strip() == b"U"
        assert (rundir / "code" / "train.py").read_text() == "print('hi')\n"
        assert (rundir / "code" / "pkg" / "big.bin").read_bytes() == (code / "pkg" / "big.bin").read_bytes()
        for name in ("job.json", "a.sh", "code/train.py"):
            assert stat.S_IMODE((rundir / name).stat().st_mode) == 0o600, name
        assert stat.S_IMODE((rundir / "code" / "pkg").stat().st_mode) == 0o700
    finally:
        helper.kill()
        helper.wait(10)
