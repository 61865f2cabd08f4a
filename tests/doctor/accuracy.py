"""The doctor's accuracy on the corpus of real public logs: ``python -m tests.doctor.accuracy [--show-held-out]``.

Each excerpt is written to a file of its own name and given to ``diagnose_files``; its first diagnosis is
compared with the cause the thread's resolution shows. Printed for the tuning and the held-out sets
(the frozen split of ``tests/doctor/corpus/SPLIT.md``):

- per cause id, precision and recall of the first diagnosis over the fair cases (failures whose cause
  is visible in the excerpt) plus the healthy logs;
- fair first-cause accuracy: the first diagnosis names the thread's cause (for a thread whose cause is
  ``unknown``, ``unknown`` or no diagnosis is right);
- the wrong-cause rate: the first diagnosis names a cause other than the thread's (``unknown`` and no
  diagnosis are not wrong, only unhelpful), over the fair cases and over every failure;
- healthy false alarms: a healthy log that got any diagnosis;
- the corpus size per cause id and per project.

Misses are listed for the tuning set only; ``--show-held-out`` lists the held-out misses too (never while
tuning: the held-out set measures, it does not teach). ``--held-out-of corpus_l.jsonl`` also prints the held-out
cases of one corpus file as a set of their own (a batch collected after a change). ``--skip-invalid`` skips malformed
rows with a warning (for collectors' files still being written) instead of stopping. Exit 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.doctor.corpus import Case, load_corpus
from tui.doctor import diagnose_files

__all__ = ["Scored", "Summary", "diagnose_case", "score", "summarize"]

NO_DIAGNOSIS = "none"


@dataclass(frozen=True)
class Scored:
    """One case and what the doctor said first (``none`` for no diagnosis)."""

    case: Case
    got: str
    evidence: str
    diagnoses: int

    @property
    def right(self) -> bool:
        if self.case.kind == "healthy":
            return self.diagnoses == 0
        if self.case.cause == "unknown":
            return self.got in ("unknown", NO_DIAGNOSIS)
        return self.got == self.case.cause

    @property
    def wrong_cause(self) -> bool:
        """A failure given a named cause that is not the thread's."""
        return self.case.kind == "failure" and self.got not in ("unknown", NO_DIAGNOSIS) and self.got != self.case.cause


def diagnose_case(case: Case, base: Path) -> Scored:
    """Feed one excerpt to the doctor as its own file; what came first."""
    folder = base / case.id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.file
    path.write_text(case.excerpt + "\n", encoding="utf-8")
    found = diagnose_files([path])
    if not found:
        return Scored(case, NO_DIAGNOSIS, "", 0)
    first = found[0]
    evidence = f"{first.evidence[0].line}: {first.evidence[0].text}" if first.evidence else ""
    return Scored(case, first.cause, evidence, len(found))


def score(cases: Sequence[Case]) -> list[Scored]:
    """Every case diagnosed."""
    with tempfile.TemporaryDirectory() as tmp:
        return [diagnose_case(case, Path(tmp)) for case in cases]


@dataclass(frozen=True)
class Summary:
    """The headline numbers of one set."""

    fair: int
    fair_right: int
    failures: int
    wrong_fair: int
    wrong_all: int
    healthy: int
    false_alarms: int

    @property
    def accuracy(self) -> float:
        return self.fair_right / self.fair if self.fair else 0.0

    @property
    def wrong_rate(self) -> float:
        return self.wrong_fair / self.fair if self.fair else 0.0

    @property
    def wrong_rate_all(self) -> float:
        return self.wrong_all / self.failures if self.failures else 0.0


def summarize(scored: Sequence[Scored]) -> Summary:
    fair = [s for s in scored if s.case.fair]
    failures = [s for s in scored if s.case.kind == "failure"]
    healthy = [s for s in scored if s.case.kind == "healthy"]
    return Summary(len(fair), sum(s.right for s in fair), len(failures), sum(s.wrong_cause for s in fair),
                   sum(s.wrong_cause for s in failures), len(healthy), sum(not s.right for s in healthy))


def _pct(num: int, den: int) -> str:
    return f"{num / den:6.1%}" if den else "     -"


def per_cause(scored: Sequence[Scored]) -> dict[str, tuple[int, int, int]]:
    """``{cause: (true positives, predicted, expected)}`` over the fair cases and the healthy logs."""
    counted = [s for s in scored if s.case.fair or s.case.kind == "healthy"]
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for s in counted:
        expected = s.case.cause if s.case.kind == "failure" else None
        if expected is not None:
            out[expected][2] += 1
        if s.got != NO_DIAGNOSIS:
            out[s.got][1] += 1
            if s.got == expected:
                out[s.got][0] += 1
    return {cause: (v[0], v[1], v[2]) for cause, v in sorted(out.items())}


def print_set(title: str, scored: Sequence[Scored], *, show_misses: bool) -> None:
    summary = summarize(scored)
    print(f"\n== {title}: {len(scored)} excerpts from {len({s.case.thread for s in scored})} threads")
    print(f"{'cause':<18}{'precision':>10}{'recall':>10}{'TP':>5}{'said':>6}{'cases':>7}")
    for cause, (tp, said, expected) in per_cause(scored).items():
        print(f"{cause:<18}{_pct(tp, said):>10}{_pct(tp, expected):>10}{tp:>5}{said:>6}{expected:>7}")
    print(f"fair first-cause accuracy: {summary.fair_right}/{summary.fair} = {_pct(summary.fair_right, summary.fair).strip()}"
          " (failures whose cause is visible in the excerpt)")
    print(f"wrong cause: {summary.wrong_fair}/{summary.fair} = {_pct(summary.wrong_fair, summary.fair).strip()} of the fair cases; "
          f"{summary.wrong_all}/{summary.failures} = {_pct(summary.wrong_all, summary.failures).strip()} of every failure")
    print(f"healthy false alarms: {summary.false_alarms}/{summary.healthy}")
    if show_misses:
        for s in scored:
            if not s.right and (s.case.fair or s.case.kind == "healthy"):
                print(f"miss: {s.case.id} ({s.case.source.rsplit('/', 1)[-1]}): expected {s.case.cause}, got {s.got}"
                      + (f" @ {s.evidence[:160]}" if s.evidence else ""))
        wrong_hidden = [s for s in scored if s.wrong_cause and not s.case.fair]
        for s in wrong_hidden:
            print(f"wrong (cause not visible): {s.case.id}: expected {s.case.cause}, got {s.got} @ {s.evidence[:160]}")
    else:
        print("(misses not listed: --show-held-out lists them; never while tuning)")


def print_sizes(cases: Sequence[Case]) -> None:
    held = [c for c in cases if c.held_out]
    print(f"\n== corpus: {len(cases)} excerpts from {len({c.thread for c in cases})} threads; "
          f"held out {len(held)} excerpts from {len({c.thread for c in held})} threads; "
          f"{sum(c.kind == 'healthy' for c in cases)} healthy; {sum(c.fair for c in cases)} fair failures")
    for title, key in (("cause id", lambda c: c.cause), ("project", lambda c: c.project)):
        counts = Counter(key(c) for c in cases)
        held_counts = Counter(key(c) for c in held)
        print(f"{title:<18}{'all':>6}{'held out':>10}")
        for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{name:<18}{n:>6}{held_counts[name]:>10}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.doctor.accuracy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--show-held-out", action="store_true", help="also list the held-out misses (never while tuning)")
    parser.add_argument("--tuning-only", action="store_true",
                        help="score and print the tuning set alone, the held-out set not even run (while tuning)")
    parser.add_argument("--skip-invalid", action="store_true", help="skip malformed rows with a warning instead of stopping")
    parser.add_argument("--held-out-of", metavar="FILE", action="append", default=[],
                        help="also print the held-out cases read from corpus file FILE (e.g. corpus_l.jsonl) as a set of "
                             "their own: a batch collected after a change, measured apart from the older ones")
    args = parser.parse_args(argv)
    problems: list[str] = []
    cases = load_corpus(skip_invalid=problems if args.skip_invalid else None)
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    if args.tuning_only:
        if args.show_held_out or args.held_out_of:
            parser.error("--tuning-only runs no held-out case: drop --show-held-out and --held-out-of")
        print_set("tuning set", score([c for c in cases if not c.held_out]), show_misses=True)
        return 0
    scored = score(cases)
    print_set("tuning set", [s for s in scored if not s.case.held_out], show_misses=True)
    print_set("held-out set", [s for s in scored if s.case.held_out], show_misses=args.show_held_out)
    for name in args.held_out_of:
        batch = [s for s in scored if s.case.held_out and s.case.source.rsplit("/", 1)[-1].split(":")[0] == name]
        if not batch:
            parser.error(f"no held-out case was read from a corpus file named {name}")
        print_set(f"held-out set, {name} only", batch, show_misses=args.show_held_out)
    print_sizes(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
