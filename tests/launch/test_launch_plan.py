"""Plan once: a launch on N nodes makes one plan, one memory estimate and one code bundle, and takes what the
checklist approved as it is (issue 20). Driven through the fake transport of the driver tests, in milliseconds.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import shared.fit
import shared.netplan
import tui.codeship
import tui.launch.launching
import tui.launch.launchplan
from shared.config import FtwizConfig, JobConfig, NodeConfig
from tests.launch.fakelink import FakeCluster
from tests.launch.test_driver_fake import Driven, _config, _running
from tests.tui.fixture_cluster import constructed_report
from tui.exitcodes import EXIT_OK
from tui.launch.prepare import new_run
from tui.launch.run import Run
from tui.runs.status import RunStatus

NODES = ["a", "b", "c"]
MODEL = "meta-llama/Llama-2-7b-hf"  # in the catalog: the estimator knows its architecture without a download


@pytest.fixture
def counted(monkeypatch) -> Counter:
    """Calls of the launch plan builder, the per-node plan builder, the sharding estimate, the interface plan and
    the code bundle, wherever a launch reaches them."""
    calls: Counter = Counter()

    def count(module: Any, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    count(tui.launch.launching, "build_launch_plan")
    count(tui.launch.launchplan, "build_plan")
    count(tui.launch.launchplan, "bundle_for_run")
    count(tui.codeship, "collect_code")
    count(shared.fit, "choose_sharding")
    count(shared.netplan, "resolve_interfaces")
    return calls


def _three_nodes(tmp_path: Path) -> tuple[FtwizConfig, dict[str, Any]]:
    """Your own code on three one-GPU nodes, its model declared and ``sharding = "auto"``: a launch must estimate
    (ddp or fsdp), plan the interfaces, build every node's command and ship the code."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print('hello')\n")
    base = _config(tmp_path)
    config = FtwizConfig(
        cluster=base.cluster,
        nodes=[NodeConfig(name=n, host="127.0.0.1", workdir=f"/w/{n}", gpus=1) for n in NODES],
        job=JobConfig(workload="command", command=["train.py"], code_dir=str(tmp_path / "proj"), model=MODEL,
                      method="lora", sharding="auto", stall_timeout_s=60.0, first_step_grace_s=600.0),
    )
    reports = {n.name: constructed_report(n.name, n.host, "h100-sxm-8x") for n in config.nodes}
    return config, reports


def _launch_and_finish(tmp_path: Path, config: FtwizConfig, **run_kwargs: Any) -> Driven:
    d = Driven(tmp_path, fake=FakeCluster(NODES))
    run = Run(config, options=d.options, clock=d.fake.clock, **run_kwargs)
    d.fake.run_id = run.run_id
    run.subscribe(d._observe)
    run.launch()
    d._supervise(run)
    _running(d)
    for node in NODES:
        d.fake.nodes[node].exit(0)
    result = d.finished()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, EXIT_OK)
    return d


def test_a_three_node_launch_plans_estimates_and_bundles_once(tmp_path, counted):
    config, reports = _three_nodes(tmp_path)
    d = _launch_and_finish(tmp_path, config, reports=reports)
    assert counted["build_launch_plan"] == 1, "one launch plan"
    assert counted["build_plan"] == 1, "every node's command built in one pass, not once per node"
    assert counted["choose_sharding"] == 1, "one memory estimate for sharding = auto"
    assert counted["resolve_interfaces"] == 1, "one interface plan"
    assert (counted["bundle_for_run"], counted["collect_code"]) == (1, 1), "one code bundle"
    plan = d.run.launch_plan if d.run is not None else None
    assert plan is not None and set(plan.nodes) == set(NODES)
    jobs = {node: json.loads(d.fake.nodes[node].files["job.json"]) for node in NODES}  # type: ignore[index]
    assert plan.sharding is not None and {job["sharding"] for job in jobs.values()} == {plan.sharding[0]}
    stored = d.record()
    for node in NODES:
        files = d.fake.nodes[node].files or {}
        assert f"{node}.sh" in files and not any(f"{other}.sh" in files for other in NODES if other != node), "each node its slice"
        assert "code/train.py" in files, "the one bundle reached every node"
        assert jobs[node]["workdir"] == stored["nodes"][node]["workdir"] == f"/fake/{node}", "each node's own workdir"


def test_the_launch_takes_what_the_checklist_approved_and_estimates_nothing(tmp_path, counted):
    config, reports = _three_nodes(tmp_path)
    approved = {n: {"NCCL_SOCKET_IFNAME": "=approved0", "GLOO_SOCKET_IFNAME": "approved0", "NCCL_IB_DISABLE": "1"} for n in NODES}
    checked = SimpleNamespace(results=[], sync=None, network_env=approved, sharding=("fsdp", "auto: as the checklist decided"))
    prepared, note = new_run(config, options=Driven(tmp_path).options, reports=reports, resume=False, checked=checked)
    assert note is None and prepared.launcher.network_env is approved and prepared.launcher.sharding == checked.sharding
    prepared.record.close()
    d = _launch_and_finish(tmp_path, config, reports=reports, network_env=prepared.launcher.network_env, sharding=prepared.launcher.sharding)
    assert counted["choose_sharding"] == 0 and counted["resolve_interfaces"] == 0, "nothing the checklist decided is decided again"
    for node in NODES:
        files = d.fake.nodes[node].files or {}
        job = json.loads(files["job.json"])
        assert (job["sharding"], job["sharding_reason"]) == checked.sharding
        assert "export GLOO_SOCKET_IFNAME=approved0" in files[f"{node}.sh"].decode()


@pytest.mark.parametrize(("compute", "samples", "why"), [
    # the checklist's probe: node a twice as fast as b and c -> a takes half of the 12 samples of each step
    (SimpleNamespace(rates={"a": (2.0,), "b": (1.0,), "c": (1.0,)}, note=""), [6, 3, 3], "in proportion to the compute probe"),
    (None, [4, 4, 4], "uniform split: no checklist ran before the launch"),
    (SimpleNamespace(rates=None, note="every rank runs on H100 (no node sets the pace)"), [4, 4, 4],
     "uniform split: every rank runs on H100"),
])
def test_your_codes_shares_come_from_the_checklists_probe_into_each_nodes_job(tmp_path, compute, samples, why):
    config, reports = _three_nodes(tmp_path)
    config.job = config.job.model_copy(update={"balance": "auto", "micro_batch_size": 2, "grad_accum_steps": 2})
    config.job.model_fields_set.update({"micro_batch_size", "grad_accum_steps"})
    prepared, _ = new_run(config, options=Driven(tmp_path).options, reports=reports, resume=False,
                          checked=SimpleNamespace(results=[], sync=None, network_env=None, sharding=None, compute=compute))
    assert prepared.launcher.compute is compute
    prepared.record.close()
    d = _launch_and_finish(tmp_path, config, reports=reports, compute=compute)
    got = []
    for node in NODES:
        job = json.loads((d.fake.nodes[node].files or {})["job.json"])
        (mine,) = job["balance_env"][node]  # one rank per node: its FTWIZ_* numbers, read by the user-code runner
        assert mine["FTWIZ_BALANCE"] == "auto" and mine["FTWIZ_GLOBAL_BATCH"] == "12"
        assert int(mine["FTWIZ_MICRO_BATCH"]) * int(mine["FTWIZ_GRAD_ACCUM"]) == int(mine["FTWIZ_SAMPLES_PER_STEP"])
        got.append(int(mine["FTWIZ_SAMPLES_PER_STEP"]))
    assert got == samples
    balance = d.record()["balance"]
    assert [r["samples_per_step"] for r in balance["ranks"]] == samples and why in balance["why"]
    assert any(why in str(event) for event in d.events), "the launch log says how the split was made"


def test_each_gpus_largest_micro_batch_from_the_checklist_reaches_the_recipe_and_your_code(tmp_path):
    """``balance = "auto"``: the memory fit's per-node micro-batch caps (``ChecklistRun.micro_caps``) go into every
    node's ``job.json`` for the built-in recipe's balancer, and bound your own code's ``FTWIZ_MICRO_BATCH``."""
    config, reports = _three_nodes(tmp_path)
    caps = {"a": 3, "b": 1, "c": 1}
    compute = SimpleNamespace(rates={"a": (2.0,), "b": (1.0,), "c": (1.0,)}, note="")
    config.job = config.job.model_copy(update={"balance": "auto", "micro_batch_size": 2, "grad_accum_steps": 2})
    config.job.model_fields_set.update({"micro_batch_size", "grad_accum_steps"})
    prepared, _ = new_run(config, options=Driven(tmp_path).options, reports=reports, resume=False,
                          checked=SimpleNamespace(results=[], sync=None, network_env=None, sharding=None, compute=compute, micro_caps=caps))
    assert prepared.launcher.micro_caps == caps
    prepared.record.close()
    d = _launch_and_finish(tmp_path, config, reports=reports, compute=compute, micro_caps=caps)
    total = 0
    for node in NODES:
        job = json.loads((d.fake.nodes[node].files or {})["job.json"])
        (mine,) = job["balance_env"][node]
        assert int(mine["FTWIZ_MICRO_BATCH"]) <= caps[node], (node, mine)
        assert int(mine["FTWIZ_MICRO_BATCH"]) * int(mine["FTWIZ_GRAD_ACCUM"]) == int(mine["FTWIZ_SAMPLES_PER_STEP"])
        total += int(mine["FTWIZ_SAMPLES_PER_STEP"])
        assert "max_micro_batch" not in job, "your own code reads its numbers from FTWIZ_*; the recipe's key is not set"
    assert total == 12, "the global batch stays what the job says"

    sft = config.model_copy(update={"job": JobConfig(workload="sft", model=MODEL, dataset=str(tmp_path / "train.jsonl"), method="lora",
                                                     balance="auto", micro_batch_size=2, grad_accum_steps=2, sharding="ddp",
                                                     stall_timeout_s=60.0, first_step_grace_s=600.0)})
    for balance, expected in (("auto", caps), ("off", None)):
        sft.job = sft.job.model_copy(update={"balance": balance})
        (tmp_path / balance).mkdir()
        d = _launch_and_finish(tmp_path / balance, sft, reports=reports, micro_caps=caps)
        for node in NODES:
            job = json.loads((d.fake.nodes[node].files or {})["job.json"])
            assert job.get("max_micro_batch") == expected, (balance, node, job.get("max_micro_batch"))
