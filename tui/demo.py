"""`make demo`: this machine as a one-node cluster, end to end, on CPU in a few minutes.

1. starts the local agent (and keeps it for the whole demo);
2. runs ``ftwiz --check``;
3. launches the all-reduce check through torchrun;
4. launches a 20-step LoRA fine-tune of a tiny Llama built here (nothing is downloaded);
5. prints the loss going down and where the adapter was written.

Every step is the real command a user types (``ftwiz --config demo-work/ftwiz.toml ...``); the files
stay in ``demo-work/`` (config, run logs under ``demo-work/runs/``) for a look afterwards.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig, to_toml
from shared.protocol import Done, Progress, parse_line

DEMO_DIR = Path("demo-work").resolve()


def _say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def _ftwiz(*args: str) -> int:
    argv = [sys.executable, "-m", "tui.cli", "--config", str(DEMO_DIR / "ftwiz.toml"), *args]
    print("$ ftwiz " + " ".join(shlex.quote(a) for a in argv[3:]), flush=True)
    return subprocess.call(argv, cwd=DEMO_DIR)


def _free_port() -> int:
    # A fresh port per demo: an agent already on this box (on 8462, or another demo's) is left alone.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write_config(job: JobConfig, ports: tuple[int, int]) -> FtwizConfig:
    """Write demo-work/ftwiz.toml for ``job``; ``ports`` are the agent and rendezvous ports."""
    node = NodeConfig(
        name=socket.gethostname().split(".")[0] or "localhost",
        host="127.0.0.1",
        python=sys.executable,
        workdir=str(DEMO_DIR / "node"),
        gpus="all",  # every GPU; one CPU rank (gloo) on a machine without one
        local=True,
    )
    config = FtwizConfig(
        cluster=ClusterConfig(name="demo", agent_port=ports[0], rendezvous_port=ports[1], agent_token_file=str(DEMO_DIR / "agent.token")),
        nodes=[node],
        job=job,
    )
    path = DEMO_DIR / "ftwiz.toml"
    original = path.read_text() if path.exists() else None
    path.write_text(to_toml(config, original))
    return config


def _tiny_assets() -> tuple[Path, Path]:
    model, data = DEMO_DIR / "tiny-llama", DEMO_DIR / "data" / "train.jsonl"
    if not (model / "config.json").exists():
        subprocess.check_call([sys.executable, "-m", "agent.workloads", "--make-tiny-model", str(model)])
    if not data.exists():
        data.parent.mkdir(parents=True, exist_ok=True)
        subprocess.check_call([sys.executable, "-m", "agent.workloads", "--make-tiny-dataset", str(data)])
    return model, data


def _latest_run() -> Path | None:
    runs = sorted((DEMO_DIR / "runs").glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else None


def _summarise_sft(run_dir: Path) -> None:
    losses: list[tuple[int, float]] = []
    adapter = None
    for log in sorted(run_dir.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            record = parse_line(line)
            if isinstance(record, Progress) and record.step is not None and record.loss is not None:
                losses.append((record.step, record.loss))
            if isinstance(record, Done) and record.adapter_path:
                adapter = record.adapter_path
    if losses:
        print("loss by step: " + "  ".join(f"{step}:{loss:.3f}" for step, loss in losses))
        first, last = losses[0][1], losses[-1][1]
        verdict = "down" if last < first else "NOT down"
        print(f"loss went {verdict}: {first:.3f} -> {last:.3f}")
    print(f"adapter written to: {adapter or '(not reported)'}")
    print(f"run logs: {run_dir}")


def main() -> int:
    """Run the five demo steps; exit non-zero at the first that fails."""
    DEMO_DIR.mkdir(exist_ok=True)
    from tui.local_agent import LocalAgent

    _say("1/5 building a tiny Llama and dataset locally (no downloads)")
    model, data = _tiny_assets()
    allreduce = JobConfig(workload="allreduce", sizes_mb=[1, 4, 16], iterations=10, warmup_iterations=2)
    ports = (_free_port(), _free_port())
    config = _write_config(allreduce, ports)
    _say(f"starting the local agent on 127.0.0.1:{ports[0]}")
    with LocalAgent(config, log_path=DEMO_DIR / "agent.log") as agent:
        print(f"agent: {agent.url} ({'started' if agent.started else 'already running'}; log {agent.log_path})")
        _say("2/5 pre-launch checklist")
        code = _ftwiz("--check")
        if code != 0:
            print(f"ftwiz --check exited {code}: a check failed (see above)", file=sys.stderr)
            return code
        _say("3/5 all-reduce check through torchrun (gloo on CPU)")
        code = _ftwiz("--launch", "--yes")
        if code != 0:
            return code
        _say("4/5 a 20-step LoRA fine-tune of the tiny model")
        _write_config(JobConfig(
            workload="sft", model=str(model), dataset=str(data), method="lora", seq_len=64,
            micro_batch_size=4, grad_accum_steps=1, max_steps=20, learning_rate=3e-3, save_steps=10,
            precision="fp32", optimizer="adamw", output_dir=str(DEMO_DIR / "checkpoints" / "tiny-lora"),
            gradient_checkpointing=False,
        ), ports)
        code = _ftwiz("--launch", "--yes")
        if code != 0:
            return code
        _say("5/5 result")
        run_dir = _latest_run()
        if run_dir is not None:
            _summarise_sft(run_dir)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
