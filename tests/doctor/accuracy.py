"""Per-cause accuracy of the doctor on the quoted public excerpts: ``python -m tests.doctor.accuracy``.

An excerpt counts as right when the doctor's first diagnosis has the cause a reader of the thread gives.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.doctor.fixtures.excerpts import EXCERPTS, HELD_OUT
from tui.doctor import diagnose_files


def first_cause(entry: dict[str, str], base: Path) -> str:
    """The first diagnosis' cause for one excerpt (``none`` when there is none)."""
    folder = base / entry["id"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / entry["file"]
    path.write_text(entry["text"] + "\n", encoding="utf-8")
    found = diagnose_files([path])
    return found[0].cause if found else "none"


def table(entries: list[dict[str, str]] = EXCERPTS) -> tuple[dict[str, tuple[int, int]], list[tuple[str, str, str]]]:
    """``{cause: (right, total)}`` and the misses ``(id, expected, got)`` over ``entries``."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            got = first_cause(entry, Path(tmp))
            totals[entry["expected"]][1] += 1
            if got == entry["expected"]:
                totals[entry["expected"]][0] += 1
            else:
                misses.append((entry["id"], entry["expected"], got))
    return {k: (v[0], v[1]) for k, v in sorted(totals.items())}, misses


def main() -> int:
    missed = 0
    for title, entries in (("the set the signatures were written against", EXCERPTS), ("held out (collected after)", HELD_OUT)):
        counts, misses = table(entries)
        print(f"\n{title}\n{'cause':<16}{'right':>6}{'total':>6}  accuracy")
        for cause, (right, total) in counts.items():
            print(f"{cause:<16}{right:>6}{total:>6}  {right / total:6.0%}")
        right = sum(r for r, _ in counts.values())
        total = sum(t for _, t in counts.values())
        print(f"{'all':<16}{right:>6}{total:>6}  {right / total:6.0%}")
        for ident, expected, got in misses:
            print(f"miss: {ident}: expected {expected}, got {got}")
        missed += len(misses) if entries is EXCERPTS else 0
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
