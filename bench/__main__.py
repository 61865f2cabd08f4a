"""Run the benchmarks and print one table: measure, value, baseline, ratio, target.

Each ``bench/<name>_bench.py`` exposes ``run(args) -> list[dict]``; rows carry ``measure``, ``value``,
``unit`` and optionally ``baseline`` (a figure measured in the same run, e.g. iperf3 or a bare
all_reduce loop), ``ratio`` and ``target``. Results are also written to ``bench-results/latest.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path

import bench


def _modules(selected: list[str]) -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.endswith("_bench"))
    if selected:
        names = [n for n in names if any(s in n for s in selected)]
    return names


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("only", nargs="*", help="run only benchmarks whose module name contains one of these")
    parser.add_argument("--quick", action="store_true", help="shorter runs (fewer requests, shorter idle windows)")
    parser.add_argument("--nodes", default="", metavar="N,M",
                        help="check: namespace-cluster sizes to time ftwiz --check on (e.g. 16,64; needs root)")
    parser.add_argument("--out", default="bench-results/latest.json", help="where to write all rows as JSON")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    failed = []
    for name in _modules(args.only):
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(f"bench.{name}")
            for row in module.run(args):
                row.setdefault("bench", name)
                rows.append(row)
        except Exception:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
        print(f"   {name} took {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    headers = ["bench", "measure", "value", "unit", "baseline", "ratio", "target"]
    table = [[_fmt(r.get(h)) for h in headers] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"time": time.time(), "rows": rows, "failed": failed}, indent=2))
    if failed:
        print(f"benchmarks that raised: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
