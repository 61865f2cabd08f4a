"""The doctor on the corpus of real public logs (tests/doctor/corpus/, the frozen split of its SPLIT.md)."""

from __future__ import annotations

import json
import re

import pytest

from tests.doctor.corpus import CorpusError, held_out, load_corpus, parse_row


def test_every_corpus_row_is_valid_and_ids_are_unique():
    cases = load_corpus()
    assert cases, "tests/doctor/corpus/*.jsonl is empty"
    assert len({c.id for c in cases}) == len(cases)


def test_the_split_is_the_frozen_rule():
    # sha256("NVIDIA/nccl#562") mod 100 = 15 -> held out; sha256("pytorch/pytorch#18853") mod 100 = 49 -> tuning
    assert held_out("NVIDIA/nccl#562") and not held_out("pytorch/pytorch#18853")


def test_a_bad_row_names_the_file_line_and_field(tmp_path):
    good = {"id": "a-b-1-1", "thread": "a/b#1", "url": "https://github.com/a/b/issues/1", "project": "pytorch",
            "kind": "failure", "cause": "oom.gpu", "confirmed": True, "visible": True, "file": "node0.log",
            "excerpt": "CUDA out of memory", "note": "n"}
    assert parse_row(good, "x.jsonl:1").cause == "oom.gpu"
    for field, value, said in (("cause", "oom", "'cause'"), ("visible", "yes", "'visible'"), ("file", "../x", "'file'"),
                               ("project", "pytorch-lightning", "'project'")):
        with pytest.raises(CorpusError, match=rf"x\.jsonl:7: field {said}"):
            parse_row({**good, field: value}, "x.jsonl:7")
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "a-b-1-2", "kind": "healthy"}) + "\n")
    with pytest.raises(CorpusError, match=r"c\.jsonl:2: field 'cause' must be 'healthy'"):
        load_corpus(str(tmp_path))


def test_every_line_a_signature_matches_passes_the_readers_cheap_prefilter():
    """The log reader keeps only windows around lines holding one of its KEYWORDS: a line the signature
    table would match, an exception line or a traceback start must never be skipped."""
    from shared.doctor_signatures import match_line
    from tui.doctor.logs import KEYWORDS

    exception = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(?:Error|Exception)\b|Traceback \(most recent")
    skipped = [(case.id, line[:120]) for case in load_corpus() for line in case.excerpt.splitlines()
               if not any(word in line.lower().encode() for word in KEYWORDS) and (match_line(line) or exception.search(line))]
    assert not skipped
