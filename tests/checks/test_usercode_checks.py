"""The checks for your own code: job.requires (the verdicts from nodes' answers, and for real on this
machine's interpreter) and job.code."""

from __future__ import annotations

import asyncio
import sys

from shared.config import FtwizConfig, JobConfig, NodeConfig
from tui.checks.base import CheckContext
from tui.checks.usercode import NodeProbe, job_code, job_requires, judge, probe_node


def _config(**job) -> FtwizConfig:
    nodes = [NodeConfig(name="n0", host="10.0.0.1", python="/opt/py"), NodeConfig(name="n1", host="10.0.0.2", python="/opt/py")]
    return FtwizConfig(nodes=nodes, job=JobConfig(**{"workload": "command", "command": ["train.py"], **job}))


def test_missing_package_fails_with_the_pip_line():
    config = _config(requires=["trl>=0.20", "no-such-package"])
    rows = judge(config, [NodeProbe("n0", versions={"trl": "0.21.0", "no-such-package": None}),
                          NodeProbe("n1", versions={"trl": "0.21.0", "no-such-package": None})])
    fails = [r for r in rows if r.status == "fail"]
    assert [r.node for r in fails] == ["n0", "n1"]
    assert fails[0].detail == "no-such-package missing"
    assert fails[0].hint == "on n0: /opt/py -m pip install no-such-package"


def test_version_outside_the_specifier_fails_and_differing_versions_warn():
    config = _config(requires=["trl>=0.20", "transformers"])
    rows = judge(config, [NodeProbe("n0", versions={"trl": "0.19.1", "transformers": "4.57.0"}),
                          NodeProbe("n1", versions={"trl": "0.21.0", "transformers": "4.56.2"})])
    by = {(r.status, r.node): r for r in rows}
    assert by[("fail", "n0")].detail == "trl 0.19.1 does not satisfy trl>=0.20"
    assert by[("fail", "n0")].hint == "on n0: /opt/py -m pip install 'trl>=0.20'"
    warn = by[("warn", "n1")]
    assert warn.detail == "transformers 4.56.2 on n1 vs 4.57.0 on n0" and warn.hint == "on n1: /opt/py -m pip install transformers==4.57.0"


def test_all_present_passes():
    config = _config(requires=["transformers"])
    rows = judge(config, [NodeProbe("n0", versions={"transformers": "5.23.0"}), NodeProbe("n1", versions={"transformers": "5.23.0"})])
    assert [(r.status, r.detail) for r in rows] == [("pass", "transformers 5.23.0 on n0, n1")]


def test_the_probe_runs_in_a_real_interpreter(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    node = NodeConfig(name="n0", host="127.0.0.1", python=sys.executable, workdir=str(tmp_path), local=True)
    config = FtwizConfig(nodes=[node], job=JobConfig(workload="command", command=["train.py"], code_dir="",
                                                     requires=["pydantic>=2", "no-such-package"]))
    probe = probe_node(node, config, 60)
    assert probe.error is None and probe.target is True
    assert probe.versions["no-such-package"] is None and probe.versions["pydantic"].startswith("2.")
    rows = asyncio.run(job_requires(CheckContext(config, {}, client=None)))
    assert [(r.status, r.detail) for r in rows] == [("fail", "no-such-package missing")]
    assert rows[0].hint == f"on n0: {sys.executable} -m pip install no-such-package"
    config.job.command = ["missing.py"]
    rows = asyncio.run(job_requires(CheckContext(config, {}, client=None)))
    assert "script missing.py not found" in rows[0].detail


def test_job_code_checks_the_shipped_dir(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    ok = job_code(CheckContext(_config(code_dir=str(tmp_path)), {}, client=None))
    assert ok[0].status == "pass" and "1 file(s)" in ok[0].detail
    wrong = job_code(CheckContext(_config(code_dir=str(tmp_path), command=["src/other.py"]), {}, client=None))
    assert wrong[0].status == "fail" and "src/other.py is not in the shipped code" in wrong[0].detail
    missing = job_code(CheckContext(_config(code_dir=str(tmp_path / "nope")), {}, client=None))
    assert missing[0].status == "fail" and "is not a directory" in missing[0].detail


def test_a_mistyped_script_gets_the_closest_shipped_name(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    (wrong,) = job_code(CheckContext(_config(code_dir=str(tmp_path), command=["trian.py"]), {}, client=None))
    assert wrong.status == "fail" and wrong.hint.startswith("did you mean train.py?")




def test_a_script_asking_for_nccl_on_cpu_ranks_warns_with_the_gloo_fix(tmp_path):
    (tmp_path / "train.py").write_text("import torch.distributed as dist\nbackend = 'nccl'\ndist.init_process_group(backend=backend)\n")
    config = _config(code_dir=str(tmp_path))
    config.nodes[1].cpu_ranks = 2
    rows = job_code(CheckContext(config, {}, client=None))
    assert [r.status for r in rows] == ["pass", "warn"]
    assert "train.py:2 asks for the NCCL backend, but n1 run(s) CPU ranks" in rows[1].detail
    assert '"--backend=gloo"' in rows[1].hint
    config.job.command = ["train.py", "--backend=gloo"]  # the fix taken
    assert [r.status for r in job_code(CheckContext(config, {}, client=None))] == ["pass"]
    (tmp_path / "train.py").write_text('dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n')
    config.job.command = ["train.py"]  # the script chooses by itself
    assert [r.status for r in job_code(CheckContext(config, {}, client=None))] == ["pass"]
