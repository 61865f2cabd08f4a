"""The pending-reason table and the agent step's output parsing (pure; no Slurm needed)."""

from __future__ import annotations

from pathlib import Path

from shared.config import parse_config
from tui.slurm.agents import AgentStep
from tui.slurm.reasons import REASONS, explain, hopeless


def test_reasons_as_squeue_prints_them() -> None:
    # squeue 22.05 printed exactly these on the test cluster (tests/cluster/slurm.py): 4 nodes asked, 3 up.
    assert explain("ReqNodeNotAvail, May be reserved for other job") is REASONS["ReqNodeNotAvail"]
    # ... and, in one CI dry run on a loaded host, the backfill scheduler's words for the same job (squeue, scontrol)
    backfill = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    assert explain(backfill) is explain(backfill.replace(" ", "_")) is REASONS["Nodes required for job are DOWN"]
    assert explain(backfill).meaning.startswith(REASONS["ReqNodeNotAvail"].meaning) and not hopeless(backfill)
    assert hopeless("PartitionConfig") and not hopeless("Resources") and not hopeless("Priority")
    unknown = explain("SomethingNew")
    assert "SomethingNew" in unknown.meaning and "job_reason_codes" in unknown.fix
    assert all(row.fix for row in REASONS.values())


def test_agent_step_maps_task_labels_to_nodes_and_ports() -> None:
    config = parse_config('[cluster]\nbackend = "slurm"\n[slurm]\nnodes = 2\npython = "/venv/bin/python"\n')
    step = AgentStep(config, "7", ["a", "b"], {"a": "10.0.0.1", "b": "10.0.0.2"},
                     token_file=Path("/w/.ftwiz-slurm/7/agent.token"), workdir_abs="/w")
    argv = step.argv()
    assert argv[:3] == ["srun", "--jobid=7", "--overlap"] and "--port" in argv and argv[argv.index("--port") + 1] == "0"
    # Constructed in the form srun --label and the agent's uvicorn start line took on the test cluster.
    lines = ["1: ftwiz-agent-step node=b", "0: ftwiz-agent-step node=a",
             "0: 2026-11-23 22:50:01,000 INFO uvicorn.error: Uvicorn running on http://0.0.0.0:41253 (Press CTRL+C to quit)",
             "1: 2026-11-23 22:50:01,100 INFO uvicorn.error: Uvicorn running on http://0.0.0.0:36995 (Press CTRL+C to quit)"]

    class FakeOut:
        stdout = iter(line + "\n" for line in lines)

    step._proc = FakeOut()  # type: ignore[assignment]
    step._read()
    assert step.ports == {"a": 41253, "b": 36995}
    concrete = step.cluster_config()
    assert [(n.name, n.host, n.agent_port) for n in concrete.nodes] == [("a", "10.0.0.1", 41253), ("b", "10.0.0.2", 36995)]
    assert concrete.master.name == "a" and concrete.cluster.agent_token_file == "/w/.ftwiz-slurm/7/agent.token"
