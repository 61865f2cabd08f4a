"""``[cluster] backend``, ``[slurm]`` and the exported sbatch script (pure; no Slurm needed)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from shared.config import ConfigError, parse_config
from tui.launch.plan import build_plan
from tui.slurm.export import allocation_config, export_script
from tui.slurm.options import sbatch_options

SLURM = """\
[cluster]
backend = "slurm"
rendezvous_port = 29600

[slurm]
partition = "gpu"
nodes = 4
gpus_per_node = 8
time = "04:00:00"
account = "lab"
sbatch_args = ["--exclusive", "--constraint=h100 ib"]
python = "/opt/venv/bin/python"
workdir = "/shared/ftwiz"

[job]
workload = "allreduce"

[nccl]
env = { NCCL_DEBUG = "WARN" }
"""


def test_slurm_backend_needs_no_nodes_and_ssh_still_does() -> None:
    config = parse_config(SLURM)
    assert config.cluster.backend == "slurm" and config.nodes == []
    assert config.slurm.nodes == 4 and config.slurm.sbatch_args == ["--exclusive", "--constraint=h100 ib"]
    with pytest.raises(ConfigError) as err:
        parse_config('[cluster]\nname = "x"\n')
    assert err.value.field == "nodes" and 'backend = "slurm"' in err.value.message


@pytest.mark.parametrize(("line", "field"), [
    ('time = "4 hours"', "slurm.time"),
    ("nodes = 0", "slurm.nodes"),
    ('partition = "gpu; rm -rf /"', "slurm.partition"),
    ('flavour = "x"', "slurm.flavour"),
])
def test_slurm_errors_name_the_field_and_line(line: str, field: str) -> None:
    key = line.split(" =")[0]
    old = next((x for x in SLURM.splitlines() if x.startswith(key + " =")), 'account = "lab"')
    text = SLURM.replace(old + "\n", line + "\n", 1)
    with pytest.raises(ConfigError) as err:
        parse_config(text, "ftwiz.toml")
    assert err.value.field == field
    assert err.value.line == text.splitlines().index(line) + 1


def test_sbatch_options() -> None:
    options = sbatch_options(parse_config(SLURM).slurm, job_name="ftwiz-r1")
    assert options == ["--job-name=ftwiz-r1", "--nodes=4", "--ntasks-per-node=1", "--time=04:00:00",
                       "--gpus-per-node=8", "--partition=gpu", "--account=lab", "--exclusive", "--constraint=h100 ib"]


def test_exported_script_runs_the_ssh_backends_torchrun_line(tmp_path) -> None:
    config = parse_config(SLURM)
    script = export_script(config, "r1", workdir_abs="/shared/ftwiz", workloads={"ftwiz_workloads/__main__.py": b"print(1)\n"})
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False).returncode == 0
    assert "#SBATCH --nodes=4\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert "#SBATCH --output=/shared/ftwiz/runs/r1/slurm-%j.out\n" in script
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh /shared/ftwiz/runs/r1/node.sh" in script
    node_sh = script.split("<<'FTWIZ_NODE_SCRIPT_END'\n", 1)[1].split("\nFTWIZ_NODE_SCRIPT_END\n", 1)[0]
    (tmp_path / "node.sh").write_text(node_sh)
    assert subprocess.run(["sh", "-n", str(tmp_path / "node.sh")], capture_output=True, check=False).returncode == 0

    # The same plan the SSH backend builds for a non-master node of a 4-node allocation, per-node values aside.
    concrete = allocation_config(config, ["a", "b", "c", "d"], ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"])
    ssh_plan = build_plan(concrete, "r1", rundirs=dict.fromkeys("abcd", "/shared/ftwiz/runs/r1"))[-1]
    torchrun = next(line for line in node_sh.splitlines() if "torch.distributed.run" in line)
    rendered = torchrun.split(" < /dev/null", 1)[0]
    expected = [{"--rdzv-endpoint=10.0.0.1:29600": '--rdzv-endpoint="$MASTER_ADDR"' + shlex.quote(":29600"),
                 "--rdzv-conf=is_host=false": shlex.quote("--rdzv-conf=is_host=") + '"$FTWIZ_IS_HOST"',
                 "--local-addr=10.0.0.4": "--local-addr=" + '"$FTWIZ_LOCAL_ADDR"'}.get(a, shlex.quote(a))
                for a in ssh_plan.argv]
    assert rendered == " ".join(expected)
    for key, value in ssh_plan.env.items():
        wanted = {"MASTER_ADDR": '"$MASTER_ADDR"', "FTWIZ_NODE": '"$FTWIZ_NODE_NAME"'}.get(key, shlex.quote(value))
        assert f"export {key}={wanted}\n" in node_sh, key
    assert "export NCCL_DEBUG=WARN\n" in node_sh


def test_newline_in_sbatch_args_is_refused() -> None:
    config = parse_config(SLURM.replace('"--exclusive"', '"--exclusive\\n#SBATCH --x"'))
    from tui.slurm.export import ExportError

    with pytest.raises(ExportError, match="sbatch_args"):
        export_script(config, "r1", workdir_abs="/w", workloads={})


def test_exported_script_and_the_run_files_it_writes_are_private(tmp_path) -> None:
    """Issue 18, finding 4 (Slurm's shared workdir): the script carries job.json (an HF_TOKEN), so it is 0700;
    run on a node, it makes the run dir 0700 and job.json and node.sh 0600 whatever the user's umask."""
    import io
    import os
    import stat

    from tui.slurm.commands import export_sbatch

    workdir = tmp_path / "shared"
    text = SLURM.replace('workload = "allreduce"', 'workload = "command"\ncommand = ["train.py"]\ncode_dir = ""\n'
                                                   'env = { HF_TOKEN = "hf_private_value" }')
    config = parse_config(text.replace('workdir = "/shared/ftwiz"', f'workdir = "{workdir}"'))
    old_umask = os.umask(0o022)
    try:
        assert export_sbatch(config, str(tmp_path / "job.sbatch"), stderr=io.StringIO()) == 0
        script = (tmp_path / "job.sbatch").read_text()
        assert stat.S_IMODE((tmp_path / "job.sbatch").stat().st_mode) == 0o700
        (rundir,) = (workdir / "runs").iterdir()
        assert stat.S_IMODE(rundir.stat().st_mode) == 0o700
        # What every node runs before srun: unpack the payload and write node.sh (Slurm's own commands left out).
        before_srun = script.split("\nFTWIZ_MASTER_NODE=", 1)[0] + "\n" + "cat > " + script.split("\ncat > ", 1)[1].split("\necho ", 1)[0]
        (tmp_path / "before_srun.sh").write_text(before_srun)
        done = subprocess.run(["bash", str(tmp_path / "before_srun.sh")], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    finally:
        os.umask(old_umask)
    assert "hf_private_value" in (rundir / "job.json").read_text()
    for name in ("job.json", "node.sh", "ftwiz_workloads/__init__.py"):
        assert stat.S_IMODE((rundir / name).stat().st_mode) == 0o600, name
