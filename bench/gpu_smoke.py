"""``make gpu-smoke``: the GPU paths run for real once, smoke first (seed ``gpu-only-components.md``).

On a machine with NVIDIA GPUs:

1. records one NVML sample as a *recorded* fixture (machine, driver, date) under ``bench-results/``;
2. runs the all-reduce check over NCCL on every GPU;
3. runs a few steps each of LoRA, QLoRA, FSDP full and FSDP LoRA (the built-in sft recipe under torchrun) on
   the tiny model and on one small real architecture built from its published config (no download), then
   LoRA under DDP and FSDP with ``balance = "auto"`` (the balanced loop) on the tiny model;
4. prints the estimator's predicted per-GPU peak beside the measured ``torch.cuda.max_memory_allocated``.

Without a GPU it says so, runs the CPU variants (LoRA on 1 rank, FSDP full and LoRA on 2 gloo ranks) and exits 0
when they pass. Exit 1 when any case fails.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "ftwiz_workloads"
# Qwen/Qwen2.5-0.5B's config.json (Hugging Face Hub, public): a real architecture, built with random weights
QWEN25_05B = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
              "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}
CASES = (  # (name, method, sharding)
    ("lora", "lora", "ddp"), ("qlora", "qlora", "ddp"), ("fsdp-full", "full", "fsdp"), ("fsdp-lora", "lora", "fsdp"),
)
BALANCED = (("lora balanced", "lora", "ddp"), ("fsdp-lora balanced", "lora", "fsdp"))  # balance = "auto": the balanced loop on CUDA


def gpu_count() -> tuple[int, str]:
    """``(count, why)``: how many CUDA GPUs torch sees here, and the reason when none."""
    import torch

    if not torch.cuda.is_available():
        return 0, f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    return torch.cuda.device_count(), ""


def main() -> int:
    """Run the smoke; print one table; exit 0 when every case passed."""
    count, why = gpu_count()
    work = Path(tempfile.mkdtemp(prefix="ftwiz-gpu-smoke-"))
    try:
        rundir = _rundir(work)
        tiny = _model(rundir, work / "tiny", hidden_size=256, layers=4)
        dataset = work / "train.jsonl"
        _python(rundir, ["-m", PACKAGE, "--make-tiny-dataset", str(dataset), "--records", "64"])
        rows: list[dict[str, Any]] = []
        if count == 0:
            print(f"gpu-smoke: no NVIDIA GPU here ({why}); running the CPU variants only", flush=True)
            for name, method, sharding in (("lora", "lora", "ddp"), ("fsdp-full", "full", "fsdp"), ("fsdp-lora", "lora", "fsdp")):
                rows.append(_case(rundir, work, tiny, dataset, name, method, sharding, nproc=1 if sharding == "ddp" else 2))
        else:
            print(f"gpu-smoke: {count} CUDA GPU(s); NVML sample -> {_record_nvml()}", flush=True)
            rows.append(_allreduce(rundir, work, count))
            real = _real_model(rundir, work / "qwen2.5-0.5b-arch")
            for model, label in ((tiny, "tiny"), (real, "qwen2.5-0.5b-arch")):
                for name, method, sharding in CASES:
                    rows.append(_case(rundir, work, model, dataset, f"{label} {name}", method, sharding, nproc=count))
                if model is tiny:
                    for name, method, sharding in BALANCED:
                        rows.append(_case(rundir, work, tiny, dataset, f"tiny {name}", method, sharding, nproc=count, balance="auto"))
        _print(rows)
        return 0 if all(r["ok"] for r in rows) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rundir(work: Path) -> Path:
    rundir = work / "rundir"
    from tui.launch.support import workload_files

    for name, data in workload_files().items():  # the package exactly as the launcher ships it (with the shared modules it imports)
        target = rundir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return rundir


def _env(rundir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PYTHONPATH=str(rundir), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def _python(rundir: Path, argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=rundir, env=_env(rundir), capture_output=True, text=True, timeout=timeout, check=True)


def _model(rundir: Path, path: Path, *, hidden_size: int, layers: int) -> Path:
    _python(rundir, ["-m", f"{PACKAGE}.tiny", "model", str(path), "--hidden-size", str(hidden_size), "--layers", str(layers)])
    return path


def _real_model(rundir: Path, path: Path) -> Path:
    """Qwen2.5-0.5B's architecture with random weights and the tiny byte tokenizer, written locally."""
    code = ("import sys, json, torch\n"
            "from transformers import AutoConfig, AutoModelForCausalLM\n"
            f"from {PACKAGE}.tiny import build_tokenizer\n"
            "cfg = json.loads(sys.argv[2]); kind = cfg.pop('model_type')\n"
            "torch.manual_seed(0)\n"
            "AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **cfg)).save_pretrained(sys.argv[1])\n"
            "build_tokenizer().save_pretrained(sys.argv[1])\n")
    _python(rundir, ["-c", code, str(path), json.dumps(QWEN25_05B)])
    return path


def _torchrun(rundir: Path, spec: Path, nproc: int, timeout: float = 900) -> tuple[int, list[dict], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
            f"--master-port={port}", "-m", PACKAGE, "--spec", str(spec)]
    done = subprocess.run(argv, cwd=rundir, env=_env(rundir), capture_output=True, text=True, timeout=timeout, check=False)
    records = []
    for line in done.stdout.splitlines():
        start = line.find('{"ftwiz"')
        if start >= 0:
            try:
                records.append(json.loads(line[start:]))
            except ValueError:
                pass
    return done.returncode, records, done.stderr[-1500:]


def _spec(work: Path, name: str, **job: Any) -> Path:
    path = work / "specs" / f"{name.replace(' ', '-')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": "gpu-smoke", "workdir": str(work / "out" / name.replace(" ", "-")), "base_dir": str(work), **job}))
    return path


def _case(rundir: Path, work: Path, model: Path, dataset: Path, name: str, method: str, sharding: str, *, nproc: int,
          balance: str = "off") -> dict[str, Any]:
    job = {"workload": "sft", "model": str(model), "dataset": str(dataset), "method": method, "sharding": sharding, "seq_len": 128,
           "balance": balance, "micro_batch_size": 2, "grad_accum_steps": 1, "max_steps": 4, "save_steps": 100, "logging_steps": 1,
           "learning_rate": 1e-4,
           "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "precision": "bf16",
           "optimizer": "adamw", "gradient_checkpointing": False, "output_dir": "out"}
    code, records, stderr = _torchrun(rundir, _spec(work, name, **job), nproc)
    losses = [r["loss"] for r in records if r["ftwiz"] == "progress"]
    peaks = [r["peak_allocated_bytes"] for r in records if r["ftwiz"] == "done" and "peak_allocated_bytes" in r]
    shares = [r["balance"] for r in records if r["ftwiz"] == "note" and "balance" in r]
    throughput = [r["throughput"] for r in records if r["ftwiz"] == "done" and "throughput" in r]
    balanced = balance == "off" or (bool(shares) and bool(throughput))
    row: dict[str, Any] = {"case": name, "ranks": nproc, "ok": code == 0 and len(losses) == 4 and balanced,
                           "loss": f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "-",
                           "measured_gib": max(peaks) / 2**30 if peaks else None,
                           "predicted_gib": _predicted(model, job, nproc) if peaks else None,
                           "detail": "" if code == 0 else stderr.strip().splitlines()[-1:] or [f"exit {code}"]}
    if balance != "off" and code == 0:
        ranks = shares[-1]["ranks"] if shares else []
        row["detail"] = [f"shares {[r['samples_per_step'] for r in ranks]}, "
                         f"{(throughput[-1].get('tokens_per_s') if throughput else None)} tok/s"]
    return row


def _predicted(model: Path, job: dict[str, Any], nproc: int) -> float | None:
    """The estimator's per-GPU allocated peak (comparable with max_memory_allocated) for this case."""
    sys.path.insert(0, str(REPO))
    from shared.catalog import arch_from_hf_config
    from shared.config import JobConfig
    from shared.estimator import estimate

    config = json.loads((model / "config.json").read_text())
    fields = {k: v for k, v in job.items() if k in JobConfig.model_fields and k not in ("model", "dataset", "output_dir")}
    est = estimate(arch_from_hf_config(config), JobConfig(**fields), dp_size=nproc, sharding=job["sharding"], padded_batches=True)
    return est.allocated_bytes / 2**30


def _allreduce(rundir: Path, work: Path, count: int) -> dict[str, Any]:
    spec = _spec(work, "allreduce", workload="allreduce", sizes_mb=[1, 16, 64], iterations=10, warmup_iterations=2)
    code, records, stderr = _torchrun(rundir, spec, count)
    rows = [r for r in records if r["ftwiz"] == "allreduce"]
    ok = code == 0 and rows and all(r.get("correct") for r in rows)
    best = max((r["busbw_gbps"] for r in rows), default=0.0)
    return {"case": "allreduce (nccl)", "ranks": count, "ok": bool(ok), "loss": f"busbw {best:.1f} GB/s", "measured_gib": None,
            "predicted_gib": None, "detail": "" if code == 0 else stderr.strip().splitlines()[-1:]}


def _record_nvml() -> str:
    """One NVML sample of every device in the fixture format, marked recorded (machine, driver, date)."""
    import pynvml  # type: ignore[import-untyped]

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device: dict[str, Any] = {}
            for name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo",
                         "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                         "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetCurrentClocksEventReasons"):
                try:
                    args = (handle, 0) if name == "nvmlDeviceGetTemperature" else (handle,)
                    device[name] = _plain(getattr(pynvml, name)(*args))
                except pynvml.NVMLError:  # "not supported" on this device: left out, as the fixture format says
                    device.setdefault("_not_supported", []).append(name)
            devices.append(device)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        data = {"kind": "ftwiz-nvml-fixture", "version": 1,
                "source": f"recorded by make gpu-smoke on {platform.node()} at {stamp}, driver {driver}",
                "system": {"nvmlSystemGetDriverVersion": driver}, "devices": devices, "processes": {}}
    finally:
        pynvml.nvmlShutdown()
    out = REPO / "bench-results" / f"nvml-recorded-{platform.node()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return str(out)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (int, float, str, list, tuple)):
        return list(value) if isinstance(value, tuple) else value
    return {k: _plain(getattr(value, k)) for k, _ in getattr(value, "_fields_", [])}


def _print(rows: list[dict[str, Any]]) -> None:
    print(f"{'case':32} {'ranks':>5} {'ok':>4} {'loss / result':>22} {'predicted GiB':>14} {'measured GiB':>13} {'error':>7}")
    for r in rows:
        pred, meas = r["predicted_gib"], r["measured_gib"]
        err = f"{(pred - meas) / meas:+.0%}" if pred and meas else "-"
        print(f"{r['case']:32} {r['ranks']:>5} {'yes' if r['ok'] else 'NO':>4} {r['loss']:>22} "
              f"{(f'{pred:.3f}' if pred else '-'):>14} {(f'{meas:.3f}' if meas else '-'):>13} {err:>7}  {' '.join(r['detail'] or [])}")
    if not any(r["measured_gib"] for r in rows):
        print("no GPU peak measured: the estimator's GPU error stays unproven on this machine")


if __name__ == "__main__":
    sys.exit(main())
