"""Shipping and tee costs (issue 18, findings 6, 7, 8): no cluster needed.

- **controller peak RSS shipping a 60 MB code_dir to 1 and to 8 nodes**: the real launch fan-out
  (:meth:`tui.launch.run.Run.launch`: every node's runner thread builds its files and uploads them) over
  an in-memory link that swallows what is sent and answers the node helper's frames. Each node count runs
  in a fresh interpreter and reports its ``ru_maxrss``; the code tar is built once per run and streamed
  from disk, so the two figures should be about equal (before: about 115 MB more per node).
- **16 000 tqdm ``\\r`` updates through the progress_regex tee** (before: 6 s, 1.5 M characters held).
- **a pathological .gitignore** (``*a*a*…b`` and ``**/`` repeated) over a small tree.

Run: ``python -m bench shipping``; one figure alone: ``python -m bench.shipping_bench --rss NODES`` (prints MB).
"""

from __future__ import annotations

import argparse
import io
import os
import queue
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUNDLE_MB = 60


def run(args: Any) -> list[dict]:
    """The rows (see the module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftwiz-ship-bench-") as tmp:
        code = Path(tmp) / "code"
        make_code_dir(code, BUNDLE_MB)
        rss = {n: _rss_in_child(n, code) for n in (1, 8)}
    rows.append({"measure": f"controller peak RSS, {BUNDLE_MB} MB code_dir to 1 node", "value": rss[1], "unit": "MB"})
    rows.append({"measure": f"controller peak RSS, {BUNDLE_MB} MB code_dir to 8 nodes", "value": rss[8], "unit": "MB",
                 "baseline": rss[1], "ratio": rss[8] / rss[1], "target": "flat in the node count (≤ 1.2)"})
    rows.append({"measure": "16 000 tqdm \\r updates through the progress_regex tee", "value": tee_seconds(16000) * 1000,
                 "unit": "ms", "target": "milliseconds (before: 6 s)"})
    rows.append({"measure": "pathological .gitignore over a small tree", "value": ignore_seconds() * 1000, "unit": "ms",
                 "target": "milliseconds (before: minutes)"})
    return rows


def make_code_dir(root: Path, megabytes: int) -> None:
    """A code dir of ``megabytes`` MB: a script and incompressible weights-sized files."""
    root.mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    for i in range(megabytes // 10):
        (root / f"blob{i}.bin").write_bytes(os.urandom(10 * 1024 * 1024))


def tee_seconds(updates: int) -> float:
    from agent.workloads.usercode import RegexTee

    tee = RegexTee(io.StringIO(), re.compile(r"(?P<step>\d+)/(?P<total>\d+)"), rank=0)
    started = time.perf_counter()
    for step in range(1, updates + 1):
        tee.write(f"\r {step * 100 // updates:3d}%|####      | {step}/{updates} [00:01<00:02, 9.99it/s]")
    return time.perf_counter() - started


def ignore_seconds() -> float:
    from tui.codeship import collect_code

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / ("a" * 40)).write_text("x")
        deep = root.joinpath(*["d"] * 20)
        deep.mkdir(parents=True)
        (deep / "f").write_text("y")
        (root / ".gitignore").write_text("*a" * 25 + "b\n" + "**/" * 40 + "nothing\n")
        started = time.perf_counter()
        collect_code(root)
        return time.perf_counter() - started


def _rss_in_child(nodes: int, code: Path) -> float:
    done = subprocess.run([sys.executable, "-m", "bench.shipping_bench", "--rss", str(nodes), "--code", str(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {nodes}-node shipping run failed: {done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


class _SwallowingStream:
    """A launch exec on a node that reads the payload frame, says ``U``, and ``P`` on ``go``."""

    def __init__(self, rundir: str) -> None:
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.lines.put(f"R {rundir}")
        self.want: Optional[int] = None
        self.got = 0

    def readline(self, timeout: float) -> Optional[str]:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, data: bytes) -> None:
        if self.want is None:
            header, _, data = data.partition(b"\n")
            self.want = int(header.split()[1])
        if self.got < self.want:
            self.got += len(data)
            if self.got >= self.want:
                self.lines.put("U")
        elif data.strip() == b"go":
            self.lines.put(f"P {os.getpid()}")

    def close(self) -> None:
        pass


class _SwallowingLink:
    def __init__(self, node: Any, cluster: Any, *, timeout: Optional[float] = None) -> None:
        self.node = node.name

    def exec(self, command: str, *, timeout: float) -> Any:
        from tui.launch.links import ExecResult

        return ExecResult(0, "", "")

    def stream(self, command: str) -> _SwallowingStream:
        run_id = re.search(r"runs/([\w.-]+)", command)
        return _SwallowingStream(f"/nowhere/{self.node}/runs/{run_id.group(1) if run_id else 'x'}")

    def close(self) -> None:
        pass


def peak_rss_mb(nodes: int, code: Path) -> float:
    """Launch a ``workload = "command"`` run of ``code`` on ``nodes`` in-memory nodes; this process's peak RSS in MB."""
    from shared.config import FtwizConfig, JobConfig, NodeConfig
    from tui.launch.run import Run, RunOptions

    config = FtwizConfig(nodes=[NodeConfig(name=f"n{i}", host=f"10.0.0.{i + 1}") for i in range(nodes)],
                         job=JobConfig(workload="command", command=["train.py"], code_dir=str(code)))
    with tempfile.TemporaryDirectory() as runs:
        run = Run(config, options=RunOptions(runs_dir=Path(runs), link_factory=_SwallowingLink), network_env={})
        run.launch()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shipping_bench", description=__doc__)
    parser.add_argument("--rss", type=int, metavar="NODES", required=True, help="launch to this many in-memory nodes")
    parser.add_argument("--code", type=Path, help=f"the code dir to ship (default: a fresh {BUNDLE_MB} MB one)")
    args = parser.parse_args()
    if args.code is not None:
        print(f"{peak_rss_mb(args.rss, args.code):.1f}")
        return 0
    with tempfile.TemporaryDirectory(prefix="ftwiz-ship-bench-") as tmp:
        make_code_dir(Path(tmp) / "code", BUNDLE_MB)
        print(f"{peak_rss_mb(args.rss, Path(tmp) / 'code'):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
