"""The sft recipe under real torchrun on loopback: LoRA on the tiny model, checkpoints, resume, bad inputs."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from agent.workloads.tiny import TINY_JOB
from tests.workloads.helpers import PACKAGE, Result, run, torchrun_argv, write_spec

pytestmark = pytest.mark.slow


def _lora_spec(directory, model, dataset, **overrides):
    job = {**TINY_JOB, "workload": "sft", "model": str(model), "dataset": str(dataset), "max_steps": 10, "save_steps": 5,
           "output_dir": "ckpt", "precision": "bf16", "optimizer": "paged_adamw_8bit", **overrides}
    return write_spec(directory, **job)


def test_lora_two_ranks_checkpoint_and_resume(rundir, tiny_model, tiny_dataset, tmp_path):
    spec = _lora_spec(tmp_path, tiny_model, tiny_dataset)
    first = run(torchrun_argv(spec, nproc=2), rundir, timeout=240)
    assert first.returncode == 0, first.output
    assert sorted(r.rank for r in first.kind("started")) == [0, 1]
    progress = first.kind("progress")
    assert [p.step for p in progress] == list(range(1, 11))
    assert {p.rank for p in progress} == {0} and {p.total_steps for p in progress} == {10}
    assert all(p.loss > 0 and p.learning_rate > 0 and p.tokens_per_s > 0 and p.epoch > 0 for p in progress)
    assert progress[-1].loss < progress[0].loss
    beats = first.kind("heartbeat")
    assert {(b.rank, b.step) for b in beats} == {(r, s) for r in (0, 1) for s in range(1, 11)}
    notes = " ".join(n.message for n in first.kind("note"))
    assert "training in fp32" in notes and "using adamw_torch on CPU" in notes
    output_dir = tmp_path / "ckpt"
    assert [(c.step, c.path) for c in first.kind("checkpoint")] == [(5, str(output_dir / "checkpoint-5")), (10, str(output_dir / "checkpoint-10"))]
    assert (output_dir / "checkpoint-5" / "trainer_state.json").is_file()
    done = {d.rank: d for d in first.kind("done")}
    assert set(done) == {0, 1} and done[0].adapter_path == str(output_dir / "final")
    assert (output_dir / "final" / "adapter_model.safetensors").is_file()
    assert (output_dir / "final" / "tokenizer.json").is_file()
    assert "Traceback" not in first.output

    # as if the run had died after step 5: only checkpoint-5 survives
    shutil.rmtree(output_dir / "checkpoint-10")
    shutil.rmtree(output_dir / "final")
    second = run(torchrun_argv(spec, nproc=2, extra=["--resume", "auto"]), rundir, timeout=240)
    assert second.returncode == 0, second.output
    resumed = second.kind("progress")
    assert [p.step for p in resumed] == list(range(6, 11))
    assert any("resuming from" in n.message and "checkpoint-5" in n.message for n in second.kind("note"))
    # same data order, optimizer and RNG state: the resumed steps repeat the first run's losses
    before = {p.step: p.loss for p in progress}
    assert [p.loss for p in resumed] == pytest.approx([before[s] for s in range(6, 11)], rel=1e-3)
    assert (output_dir / "final" / "adapter_model.safetensors").is_file()


def test_full_fine_tune_single_process_without_torchrun(rundir, tiny_model, tiny_dataset, tmp_path):
    """``python -m ftwiz_workloads`` alone is rank 0 of 1; method full saves the whole model."""
    spec = _lora_spec(tmp_path, tiny_model, tiny_dataset, method="full", max_steps=3, save_steps=100, learning_rate=1e-3)
    result = run([sys.executable, "-m", PACKAGE, "--spec", str(spec)], rundir, timeout=180)
    assert result.returncode == 0, result.output
    assert [p.step for p in result.kind("progress")] == [1, 2, 3]
    final = tmp_path / "ckpt" / "final"
    assert result.kind("done")[0].adapter_path == str(final)
    assert (final / "model.safetensors").is_file() and (final / "config.json").is_file()


def _assert_clean_failure(result: Result, message: str) -> None:
    assert result.returncode == 2, result.output
    errors = result.kind("error")
    assert errors and all(message in e.message for e in errors), result.output
    # whichever rank fails first speaks; torchrun may stop the others before they do
    assert re.search(r"ftwiz: error \(rank \d\): ", result.stderr) and message in result.stderr
    assert "Traceback" not in result.output, result.output


def test_malformed_jsonl_names_the_line(rundir, tiny_model, tiny_dataset, tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = tiny_dataset.read_text().splitlines()[:6]
    lines[3] = '{"text": "unterminated'
    bad.write_text("\n".join(lines) + "\n")
    spec = _lora_spec(tmp_path, tiny_model, bad)
    result = run(torchrun_argv(spec, nproc=2, wrapper=True), rundir, timeout=120)
    _assert_clean_failure(result, f"{bad} line 4: not valid JSON")
    assert "worker rank" in result.stderr and "failed first (exit code 2)" in result.stderr


def test_missing_model_dir(rundir, tiny_dataset, tmp_path):
    spec = _lora_spec(tmp_path, tmp_path / "no-such-model", tiny_dataset)
    result = run([sys.executable, "-m", PACKAGE, "--spec", str(spec)], rundir, timeout=120)
    _assert_clean_failure(result, f"model directory {tmp_path / 'no-such-model'} not found")


def test_unreachable_hub_model_id(rundir, tiny_dataset, tmp_path):
    """An HF id goes through the real from_pretrained; offline (HF_HUB_OFFLINE=1 in these tests) it must fail cleanly."""
    spec = _lora_spec(tmp_path, "someorg/some-model", tiny_dataset)
    result = run([sys.executable, "-m", PACKAGE, "--spec", str(spec)], rundir, timeout=120)
    _assert_clean_failure(result, "cannot load the tokenizer 'someorg/some-model': it is not a local directory")
    assert "huggingface-cli download" in result.stderr


def test_qlora_on_cpu_is_refused(rundir, tiny_model, tiny_dataset, tmp_path):
    spec = _lora_spec(tmp_path, tiny_model, tiny_dataset, method="qlora")
    result = run(torchrun_argv(spec, nproc=2, wrapper=True), rundir, timeout=120)
    _assert_clean_failure(result, 'QLoRA needs a CUDA GPU (bitsandbytes 4-bit): use method = "lora" on CPU')


def test_plain_torchrun_shows_only_its_own_traceback(rundir, tiny_model, tiny_dataset, tmp_path):
    """Under plain torchrun the workers stay clean; the one traceback is torchrun's ChildFailedError
    (which ``ftwiz_workloads.launch`` removes)."""
    spec = _lora_spec(tmp_path, tiny_model, tiny_dataset, method="qlora")
    result = run(torchrun_argv(spec, nproc=1), rundir, timeout=120)
    assert result.returncode != 0 and result.kind("error")
    assert result.output.count("Traceback (most recent call last)") == 1
    assert "ChildFailedError" in result.output and "ftwiz_workloads/" not in result.output.split("Traceback", 1)[1]
