"""FSDP and DDP fine-tunes of a 4 M-parameter Llama across three namespace nodes (2+1+1 ranks, gloo on CPU).

Each node has its own workdir (no shared filesystem). The resume tests move ranks between nodes: the first
run puts two ranks on node0, the resumed one two on node2, and node0 starts last (its interpreter sleeps
first), so global ranks 1 and 2 land on nodes that never held their shard or RNG files.

Note on arrival order: torch 2.13's c10d rendezvous numbers the nodes by sorting their descriptors (the
``--local-addr`` address string, then pid), not by arrival (torch/distributed/elastic/rendezvous/
dynamic_rendezvous.py, ``_mark_rendezvous_complete``); a late node0 alone does not move ranks, which is why
the resumed runs also change the per-node process counts.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.assets import llama_256, make
from tui.launch import commands
from tui.runs.record import latest_run_id

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fsdp_cluster")]  # on one worker, handed out first (tests/conftest.py)


@pytest.fixture(scope="module")
def small_assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A hidden-256, 4-layer Llama (about 4.1 M parameters, so a quarter shard is clearly a quarter) and 200 records."""
    data = tmp_path_factory.mktemp("fsdp-assets") / "train.jsonl"
    make("-m", "agent.workloads", "--make-tiny-dataset", str(data), "--records", "200")
    return {"model": llama_256(tmp_path_factory), "dataset": data}


def _job(assets, *, sharding: str, method: str = "full", max_steps: int = 6, output_dir: str) -> dict:
    return dict(
        workload="sft", method=method, sharding=sharding, model=str(assets["model"]), dataset=str(assets["dataset"]),
        seq_len=64, micro_batch_size=2, grad_accum_steps=1, max_steps=max_steps, save_steps=3, logging_steps=1,
        learning_rate=1e-3 if method == "full" else 1e-2, precision="fp32", optimizer="adamw", gradient_checkpointing=False,
        lora_r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
        output_dir=output_dir, stall_timeout_s=240, first_step_grace_s=600,
    )


def _launch(cluster, tmp_path: Path, monkeypatch, job: dict, *, gpus=(2, 1, 1), resume=False, late_node0: bool = False):
    """Launch through ``ftwiz --launch`` (no checklist); return (run id, run.json, records by kind)."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    overrides = {f"node{i}": {"gpus": count} for i, count in enumerate(gpus)}
    if late_node0:
        overrides["node0"]["python"] = str(_late_python(tmp_path, cluster.training_python))
    config = cluster.config(node_overrides=overrides, **job)
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    code = commands.launch(config, yes=True, detach=False, resume=resume, force=False, checklist=False, printer=quiet)
    run_id = latest_run_id(runs)
    assert run_id is not None, "no run record was written"
    record = json.loads((runs / run_id / "run.json").read_text())
    assert code == 0, (record.get("reason"), record.get("failed"), _tail(runs / run_id))
    return run_id, record, _records(runs / run_id)


def _late_python(tmp_path: Path, python: str) -> Path:
    """An interpreter wrapper that waits 6 s, so this node reaches the rendezvous after the others."""
    script = tmp_path / "late-python"
    script.write_text(f"#!/bin/sh\nsleep 6\nexec {python} \"$@\"\n")
    script.chmod(0o755)
    return script


def _records(run_dir: Path) -> dict[str, list[dict]]:
    """Every protocol record in the controller-side node logs, by kind."""
    out: dict[str, list[dict]] = {}
    for log in sorted(run_dir.glob("node*.log")):
        for line in log.read_text().splitlines():
            _, _, text = line.partition(" | ")
            if text.startswith('{"ftwiz":'):
                obj = json.loads(text)
                out.setdefault(obj["ftwiz"], []).append(obj)
    return out


def _tail(run_dir: Path) -> str:
    return "\n".join(log.read_text()[-2500:] for log in sorted(run_dir.glob("node*.log")))


def _rank_nodes(record: dict) -> dict[int, str]:
    return {int(rank): info["node"] for rank, info in record["ranks"].items()}


def _losses(records: dict) -> dict[int, float]:
    return {p["step"]: p["loss"] for p in records.get("progress", [])}


def _drop_after(cluster, output_dir: str, step: int) -> None:
    """As if the run had died after ``step``: later checkpoints and the final directory gone on every node."""
    for node in cluster.nodes:
        root = node.workdir / output_dir
        for child in root.iterdir():
            if child.name == "final" or (child.name.startswith("checkpoint-") and int(child.name.split("-")[1]) > step):
                shutil.rmtree(child)


def _probe_matches(final: Path, probe: list[float], base_model: Path | None = None) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from agent.workloads.fsdp_train import probe_ids

    model: Any
    if base_model is None:
        model = AutoModelForCausalLM.from_pretrained(final)
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model), final)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([probe_ids(model.config.vocab_size)])).logits[0, -1, : len(probe)]
    assert [float(x) for x in logits] == pytest.approx(probe, abs=1e-4)


def _shard_notes(records: dict) -> dict[int, dict]:
    return {n["rank"]: n for n in records.get("note", []) if "shard_params" in n}


def test_fsdp_full_shards_checkpoints_and_resumes_with_ranks_moved(cluster3, tmp_path, monkeypatch, small_assets):
    job = _job(small_assets, sharding="fsdp", output_dir="ckpt/fsdp-full")
    run_id, record, records = _launch(cluster3, tmp_path, monkeypatch, job)
    first_map = _rank_nodes(record)
    assert sorted(first_map) == [0, 1, 2, 3]
    # each rank's own report: about a quarter of the parameters and their bytes
    shards = _shard_notes(records)
    assert sorted(shards) == [0, 1, 2, 3]
    total = shards[0]["total_params"]
    assert total > 4_000_000 and {s["total_params"] for s in shards.values()} == {total}
    for rank, shard in shards.items():
        assert shard["world_size"] == 4 and shard["fsdp_units"] == 5
        assert shard["shard_params"] == pytest.approx(total / 4, rel=0.03), (rank, shard)
        assert shard["shard_bytes"] == pytest.approx(shard["total_bytes"] / 4, rel=0.03)
        assert f"fsdp: rank {rank} holds 1/4 of" in shard["message"]
    assert sum(s["shard_params"] for s in shards.values()) >= total
    losses = _losses(records)
    assert sorted(losses) == list(range(1, 7)) and losses[6] < losses[1]
    # sharded checkpoints: every node holds the index, the state and only its own ranks' shards
    for node in cluster3.nodes:
        ckpt = node.workdir / job["output_dir"] / "checkpoint-3"
        assert (ckpt / ".metadata").is_file() and (ckpt / "trainer_state.json").is_file(), node.name
        mine = sorted(r for r, name in first_map.items() if name == node.name)
        assert sorted(p.name for p in ckpt.glob("*.distcp")) == [f"__{r}_0.distcp" for r in mine], node.name
    # the consolidated model, on rank 0's node, gives the trained model's logits on one process
    final = cluster3.node(first_map[0]).workdir / job["output_dir"] / "final"
    probe = next(n["probe_logits"] for n in records["note"] if "probe_logits" in n)
    _probe_matches(final, probe)

    _drop_after(cluster3, job["output_dir"], 3)
    second_id, record, resumed = _launch(cluster3, tmp_path, monkeypatch, job, gpus=(1, 1, 2), resume=True, late_node0=True)
    assert second_id != run_id and record["resume"] is True
    moved = {rank for rank, node in _rank_nodes(record).items() if first_map[rank] != node}
    assert moved, (first_map, _rank_nodes(record))
    received = [n for n in resumed.get("note", []) if "received" in n.get("message", "")]
    assert received, "no rank had to fetch its shard: the ranks did not move"
    again = _losses(resumed)
    assert sorted(again) == [4, 5, 6]
    assert [again[s] for s in (4, 5, 6)] == pytest.approx([losses[s] for s in (4, 5, 6)], rel=1e-3)


def test_fsdp_lora_trains_only_the_adapter(cluster3, tmp_path, monkeypatch, small_assets):
    job = _job(small_assets, sharding="fsdp", method="lora", max_steps=4, output_dir="ckpt/fsdp-lora")
    _, record, records = _launch(cluster3, tmp_path, monkeypatch, job)
    shards = _shard_notes(records)
    assert sorted(shards) == [0, 1, 2, 3]
    for shard in shards.values():
        assert shard["shard_params"] == pytest.approx(shard["total_params"] / 4, rel=0.03)
        assert 0 < shard["shard_trainable"] < shard["shard_params"] / 50  # adapters only
    losses = _losses(records)
    assert sorted(losses) == [1, 2, 3, 4] and losses[4] < losses[1]
    final = cluster3.node(_rank_nodes(record)[0]).workdir / job["output_dir"] / "final"
    assert (final / "adapter_model.safetensors").is_file() and not (final / "model.safetensors").exists()
    # the adapter on the untouched base reproduces the trained model: nothing but the adapter changed
    probe = next(n["probe_logits"] for n in records["note"] if "probe_logits" in n)
    _probe_matches(final, probe, base_model=small_assets["model"])


def test_ddp_full_resumes_with_ranks_moved_and_no_shared_disk(cluster3, tmp_path, monkeypatch, small_assets):
    """The Trainer path: every node's checkpoint must hold the weights (transformers 5 writes them on rank 0 only)."""
    job = _job(small_assets, sharding="ddp", output_dir="ckpt/ddp-full", max_steps=4) | {"save_steps": 2}
    _, record, records = _launch(cluster3, tmp_path, monkeypatch, job)
    first_map = _rank_nodes(record)
    losses = _losses(records)
    assert sorted(losses) == [1, 2, 3, 4] and losses[4] < losses[1]
    for node in cluster3.nodes:
        assert (node.workdir / job["output_dir"] / "checkpoint-2" / "model.safetensors").is_file(), node.name
        assert (node.workdir / job["output_dir"] / "final" / "model.safetensors").is_file(), node.name
    _drop_after(cluster3, job["output_dir"], 2)
    _, record, resumed = _launch(cluster3, tmp_path, monkeypatch, job, gpus=(1, 1, 2), resume=True, late_node0=True)
    assert {rank for rank, node in _rank_nodes(record).items() if first_map[rank] != node}
    again = _losses(resumed)
    assert sorted(again) == [3, 4]
    assert [again[s] for s in (3, 4)] == pytest.approx([losses[s] for s in (3, 4)], rel=1e-3)
