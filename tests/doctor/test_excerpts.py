"""The doctor on real log excerpts quoted from public threads (tests/doctor/fixtures/excerpts.py)."""

from __future__ import annotations

import pytest

from shared.doctor_signatures import CAUSES
from tests.doctor.accuracy import first_cause
from tests.doctor.fixtures.excerpts import EXCERPTS


@pytest.mark.parametrize("entry", EXCERPTS, ids=[e["id"] for e in EXCERPTS])
def test_excerpt_first_diagnosis(entry, tmp_path):
    assert entry["expected"] in CAUSES
    assert entry["url"].startswith("https://github.com/" + entry["repository"] + "/")
    assert entry["url"].rstrip("/").endswith("/" + entry["thread"])
    assert first_cause(entry, tmp_path) == entry["expected"]
