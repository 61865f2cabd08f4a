"""Input from files, as an attacker or a broken disk could write it (issue 18, findings 5 and 9, property tests).

Property-based (hypothesis) over the four places ftwiz reads what it did not write itself: config text
(``shared.config.parse_config``), run records (``RunRecord.open`` through ``RunRecordModel``), protocol lines
(``shared.protocol.parse_line``) and log files (the doctor's ``diagnose_files``). Each must answer with a value
or the project's own error type — never a traceback — within a deadline that only a runaway (quadratic,
backtracking) input would miss. Examples are few (fast suite); ``@example`` pins the cases found by hand.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import tomlkit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.config import ConfigError, FtwizConfig, parse_config
from shared.protocol import RECORDS, format_line, make_record, parse_line
from shared.slurmjob import valid_job_id
from tests.doctor.corpus import load_corpus
from tui.doctor import diagnose_files
from tui.runs.index import RunNotFound
from tui.runs.record import RunRecord, RunRecordModel
from tui.runs.status import RunStatus

FAST = settings(max_examples=60, deadline=timedelta(seconds=5), database=None, suppress_health_check=[HealthCheck.too_slow])

VALID_CONFIG = """\
[cluster]
name = "lab"
rendezvous_port = 29500

[[nodes]]
name = "node0"
host = "10.0.0.1"
gpus = 2

[[nodes]]
name = "node1"
host = "10.0.0.2"

[job]
workload = "allreduce"
env = { A = "1" }

[nccl]
env = { NCCL_DEBUG = "WARN" }
"""

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
TOML_SCALAR = st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=24) | st.lists(st.integers(0, 9) | st.text(max_size=6), max_size=4)
CONFIG_KEYS = st.sampled_from(["name", "host", "gpus", "python", "workdir", "agent_port", "rendezvous_port", "master", "backend",
                               "workload", "model", "method", "seq_len", "env", "socket_ifname", "ib", "partition", "nodes",
                               "time", "command", "code_dir", "progress_regex", "ssh_port", "local"]) | st.text(max_size=10)
SECTION = st.dictionaries(CONFIG_KEYS, TOML_SCALAR | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3), max_size=6)
CONFIG_DOC = st.fixed_dictionaries({}, optional={"cluster": SECTION, "job": SECTION, "nccl": SECTION, "slurm": SECTION,
                                                 "nodes": st.lists(SECTION, max_size=3), "extra": SECTION})


def _parse(text: str) -> None:
    """parse_config's contract: a config or a ConfigError naming the source (anything else fails the test)."""
    try:
        assert isinstance(parse_config(text, "fuzz.toml"), FtwizConfig)
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.toml")


# ----------------------------------------------------------------------------------------------------- config


@FAST
@given(st.text(max_size=400))
@example("[cluster]\nname = " + "[" * 5000)
@example('[[nodes]]\nname = "n1\\n"\nhost = "h"\n')
def test_any_text_is_a_config_or_a_config_error(text):
    _parse(text)


@FAST
@given(CONFIG_DOC)
def test_any_toml_document_is_a_config_or_a_config_error(doc):
    try:
        text = tomlkit.dumps(doc)
    except Exception:  # tomlkit cannot write it: not an input a file could hold
        return
    _parse(text)


@FAST
@given(st.integers(0, len(VALID_CONFIG)), st.text(max_size=12))
def test_a_damaged_config_is_a_config_or_a_config_error(at, junk):
    _parse(VALID_CONFIG[:at] + junk + VALID_CONFIG[at:])


@pytest.mark.parametrize("where, text", [
    ("node name", '[[nodes]]\nname = "n1\\n"\nhost = "h"\n'),
    ("cluster name", '[cluster]\nname = "lab\\n"\n'),
    ("[job].env key", '[job]\nworkload = "command"\ncommand = ["t.py"]\nenv = { "A\\n" = "1" }\n'),
    ("[nccl].env key", '[nccl]\nenv = { "NCCL_DEBUG\\n" = "WARN" }\n'),
    ("[slurm] partition", '[cluster]\nbackend = "slurm"\n[slurm]\nworkdir = "/w"\npartition = "gpu\\n"\n'),
    ("-m module", '[job]\nworkload = "command"\ncommand = ["-m", "pkg.train\\n"]\n'),
])
def test_names_and_keys_are_matched_whole(where, text):
    """A trailing newline passed ``re.match`` with ``$`` (a node ``n1\\n`` wrote ``n1\\n.log``): now refused."""
    with pytest.raises(ConfigError):
        parse_config(text, "fuzz.toml")


# ------------------------------------------------------------------------------------------------ run records


RECORD_FIELDS = sorted(RunRecordModel.model_fields)


@FAST
@given(st.dictionaries(st.sampled_from(RECORD_FIELDS) | st.text(max_size=8), JSON, max_size=8),
       st.sampled_from(["20260101-000000-abcd", "x"]))
@example({"run_id": "20260101-000000-abcd", "status": "detached", "slurm": {"job_id": "--me"}}, "20260101-000000-abcd")
@example({"run_id": "20260101-000000-abcd", "nodes": {"n": {"pgid": "1; kill"}}}, "20260101-000000-abcd")
def test_any_run_json_opens_as_a_typed_record_or_is_refused(fields, run_id):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / run_id).mkdir()
        (base / run_id / "run.json").write_text(json.dumps({"run_id": run_id, **fields}, default=str))
        try:
            model = RunRecord.open(base, run_id).model
        except RunNotFound as exc:
            assert "run.json" in str(exc)
            return
        assert isinstance(model.status, RunStatus) and model.run_id == run_id
        assert all(node.pgid is None or isinstance(node.pgid, int) for node in model.nodes.values())
        assert model.slurm is None or "job_id" not in model.slurm or valid_job_id(str(model.slurm["job_id"]))


@FAST
@given(st.binary(max_size=300))
@example(b"[" * 100000)
@example(b'{"run_id": "20260101-000000-abcd", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")
def test_any_bytes_in_run_json_are_a_record_or_refused(raw):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "20260101-000000-abcd").mkdir()
        (base / "20260101-000000-abcd" / "run.json").write_bytes(raw)
        try:
            RunRecord.open(base, "20260101-000000-abcd")
        except RunNotFound:
            pass


# ---------------------------------------------------------------------------------------------- protocol lines


@settings(max_examples=200, deadline=timedelta(seconds=1), database=None)
@given(st.text(max_size=300) | st.text(max_size=200).map(lambda t: '[default0]:{"ftwiz"' + t))
@example('{"ftwiz":' + "[" * 100000)
@example('{"ftwiz": "progress", "loss": NaN, "step": 1e999}')
def test_any_line_is_a_protocol_record_or_none(line):
    record = parse_line(line)
    assert record is None or type(record) in RECORDS.values()


def _values(declared: str) -> st.SearchStrategy:
    """Values of a record field of type ``declared`` (``Optional[int]``, ...), as they survive JSON."""
    return {"Optional[int]": st.integers(-(2**53), 2**53), "Optional[str]": st.text(max_size=20),
            "Optional[float]": st.floats(allow_nan=False, allow_infinity=False), "Optional[bool]": st.booleans(),
            "Optional[dict]": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
            "Optional[list]": st.lists(st.integers(), max_size=3)}[declared]


@settings(max_examples=100, deadline=timedelta(seconds=1), database=None)
@given(st.sampled_from(["started", "heartbeat", "progress", "note", "error"]).flatmap(
           lambda kind: st.builds(lambda values: make_record(kind, time=1.0, **values), st.fixed_dictionaries(
               {}, optional={f.name: _values(str(f.type)) for f in dataclasses.fields(RECORDS[kind]) if f.name != "time"}))),
       st.text(max_size=20).filter(lambda p: '{"ftwiz"' not in p))
def test_a_formatted_line_parses_back_behind_any_prefix(record, prefix):
    assert parse_line(prefix + format_line(record)) == record



# ------------------------------------------------------------------------------------------------- log input

FRAGMENTS = sorted({line for case in load_corpus() for line in case.excerpt.splitlines() if line.strip()})[:400]


@FAST
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=120), max_size=40),
       st.sampled_from(["node0.log", "n1.log", "run.log"]), st.sampled_from(["", "node0/1 | ", "[rank3]: ", "[default0]:"]))
@example(["[rank0]: " + "a" * 20000 + "Error"], "node0.log", "")
def test_the_doctor_reads_any_log_text(lines, name, prefix):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text("\n".join(prefix + line for line in lines), encoding="utf-8", errors="surrogateescape")
        for diagnosis in diagnose_files([path]):
            assert diagnosis.cause


@FAST
@given(st.binary(max_size=2000))
def test_the_doctor_reads_any_log_bytes(raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "node0.log"
        path.write_bytes(raw)
        diagnose_files([path])
