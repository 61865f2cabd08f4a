"""The wire between the controller and the node helper (``shared/nodewire.py``): each writer against its parser."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared import nodewire
from shared.config import NodeConfig
from tui.launch.messages import EndingKind, NodeEnding


@pytest.mark.parametrize("pgid, started", [(4242, 1234567), (4242, None), (2, 0)])
def test_a_pgid_frame_round_trips(pgid, started):
    line = nodewire.frame(nodewire.PGID, nodewire.pgid_body(pgid, started))
    kind, body = nodewire.split_frame(line)
    assert kind == nodewire.PGID
    assert nodewire.parse_pgid(body) == (pgid, started)


@pytest.mark.parametrize("body", ["", "x", "12 y", "1 2 3", "-5"])
def test_a_garbled_pgid_body_is_none(body):
    assert nodewire.parse_pgid(body) is None


@pytest.mark.parametrize("text", ["hello", "", "  spaced  out ", "[rank0]:{\"ftwiz\": \"progress\"}", "ünïcode"])
def test_a_log_line_frame_round_trips(text):
    kind, body = nodewire.split_frame(nodewire.frame(nodewire.LINE, nodewire.line_body(987, text)))
    assert kind == nodewire.LINE
    assert nodewire.parse_line_body(body) == (987, text)


def test_a_log_line_frame_drops_carriage_returns_and_never_holds_a_newline():
    line = nodewire.frame(nodewire.LINE, nodewire.line_body(5, "a\rb\nc"))
    assert "\n" not in line and "\r" not in line
    assert nodewire.parse_line_body(nodewire.split_frame(line)[1]) == (5, "ab c")


def test_a_samples_frame_round_trips():
    rows = [{"rank": 0, "pid": 10, "state": "R", "cpu": 5, "io": 7, "run_ns": 1, "wait_ns": 2},
            {"rank": 1, "pid": 11, "state": "S", "cpu": 0, "io": 0}]
    kind, body = nodewire.split_frame(nodewire.frame(nodewire.SAMPLES, nodewire.samples_body(rows)))
    assert kind == nodewire.SAMPLES
    assert nodewire.parse_samples(body) == rows


@pytest.mark.parametrize("body", ["", "{", "[1, 2]", '{"rank": 0}', "[" * 100000])
def test_garbled_samples_are_none(body):
    assert nodewire.parse_samples(body) is None


@pytest.mark.parametrize("ending, kind", [
    ("0", EndingKind.EXITED), ("137", EndingKind.EXITED), (nodewire.STOPPED, EndingKind.STOPPED),
    (nodewire.GONE, EndingKind.SIGNALLED), (nodewire.MISSING, EndingKind.MISSING),
    (nodewire.ABORTED, EndingKind.ABORTED), (nodewire.BAD_PAYLOAD, EndingKind.ABORTED),
])
def test_an_exit_frame_round_trips_into_an_ending(ending, kind):
    letter, body = nodewire.split_frame(nodewire.frame(nodewire.EXIT, ending))
    assert letter == nodewire.EXIT
    parsed = NodeEnding.parse(body)
    assert parsed.kind is kind and parsed.raw == ending


def test_every_ending_word_has_a_kind():
    """A word the helper may send is never read as a signal by accident."""
    for word in nodewire.ENDINGS:
        assert NodeEnding.parse(word).raw == word
        assert NodeEnding.parse(word).code is None


@pytest.mark.parametrize("letter", sorted(nodewire.FRAMES))
def test_every_letter_splits_back(letter):
    assert nodewire.split_frame(nodewire.frame(letter, "body text")) == (letter, "body text")
    assert nodewire.split_frame(nodewire.frame(letter)) == (letter, "")


@pytest.mark.parametrize("line", ["Traceback (most recent call last):", "sh: 1: python3: not found", "Q 1", ""])
def test_a_line_that_is_no_frame_has_no_letter(line):
    assert nodewire.split_frame(line) == ("", line)


def test_an_unknown_letter_is_refused_when_written():
    with pytest.raises(ValueError, match="unknown frame"):
        nodewire.frame("Q", "x")


@pytest.mark.parametrize("size", [0, 1, 10 ** 12])
def test_the_payload_header_round_trips(size):
    header = nodewire.payload_header(size)
    assert header.endswith(b"\n") and header.count(b"\n") == 1
    assert nodewire.parse_payload_header(header) == size


@pytest.mark.parametrize("line", [b"", b"payload\n", b"payload -1\n", b"payload 1 2\n", b"go\n", b"\xff\xfe 3\n"])
def test_a_line_that_is_no_payload_header_is_none(line):
    assert nodewire.parse_payload_header(line) is None


@pytest.mark.parametrize("name, ok", [
    ("node0", True), ("a", True), ("n.1_x-y", True), ("x" * 63, True), ("x" * 64, False),
    ("", False), ("-a", False), (".a", False), ("a b", False), ("a\n", False), ("a/b", False), ("ä", False),
])
def test_one_node_name_rule_for_the_config_and_the_wire(name, ok):
    assert nodewire.valid_node_name(name) is ok
    try:
        NodeConfig(name=name, host="h")
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is ok


@pytest.mark.parametrize("run_id, ok", [
    ("20260101-000000-ab12", True), ("r1", True), ("x" * 64, True), ("x" * 65, False), ("", False),
    ("-r", False), ("r\n", False), ("r;rm", False), ("../r", False),
])
def test_one_run_id_rule(run_id, ok):
    assert nodewire.valid_run_id(run_id) is ok


def test_the_agents_stop_route_uses_the_same_rules():
    """The agent's ``/v1/runs/{run_id}/stop`` validates with the wire's patterns, not copies of them."""
    schema = _stop_route_schema()
    params = {p["name"]: p["schema"] for p in schema["parameters"]}
    assert params["run_id"]["pattern"] == nodewire.RUN_ID_PATTERN
    node = params["node"].get("anyOf", [params["node"]])[0]
    assert node["pattern"] == nodewire.NODE_NAME_PATTERN


def _stop_route_schema() -> dict:
    from fastapi import FastAPI

    from agent.routers.runs import router

    app = FastAPI()
    app.include_router(router)
    return app.openapi()["paths"]["/v1/runs/{run_id}/stop"]["post"]


@pytest.mark.parametrize("rundir, node", [("/w/runs/r1", "n1"), ("/home/a b/ftwiz/runs/20260101-000000-ab12", "gpu-07.cluster")])
def test_a_start_request_round_trips(rundir, node):
    assert nodewire.parse_start_request(nodewire.start_request(rundir, node)) == (rundir, node)


@pytest.mark.parametrize("text", ["", "/w/runs/r1\n", "/w/runs/r1\nn1", "relative/dir\nn1\n", "/w\nbad name\n", "/w\nn1\nextra\n"])
def test_a_half_written_or_garbled_start_request_is_none(text):
    assert nodewire.parse_start_request(text) is None


def test_a_start_request_is_refused_for_a_name_the_keeper_could_not_read_back():
    with pytest.raises(ValueError):
        nodewire.start_request("/w/runs/r1", "a\nb")


# ---------------------------------------------------------------- the run directory's files


@pytest.mark.parametrize("suffix", sorted(nodewire.RUN_FILES))
def test_every_run_file_is_the_node_name_and_its_suffix(suffix):
    assert nodewire.run_file("node-1.a", suffix) == "node-1.a" + suffix


@pytest.mark.parametrize("node, suffix", [("node0", ".tmp"), ("../x", nodewire.LOG), ("", nodewire.PGID_FILE), ("a b", nodewire.SCRIPT)])
def test_a_run_file_is_refused_for_an_unknown_suffix_or_a_bad_node_name(node, suffix):
    with pytest.raises(ValueError):
        nodewire.run_file(node, suffix)


def _sh(script: str, *, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", script], stdin=stdin, stdout=subprocess.PIPE, text=True)


def test_the_pgid_file_the_start_script_writes_parses_back_to_its_shell_and_start_time(tmp_path):
    rundir = tmp_path / "it's a run dir"  # a quote and spaces: the script quotes every path
    rundir.mkdir()
    proc = _sh(nodewire.write_pgid_sh(str(rundir), "node0") + " && echo written && read wait", stdin=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == "written\n"  # the file is in place and the shell is still alive
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19])
        written = (rundir / nodewire.run_file("node0", nodewire.PGID_FILE)).read_text()
    finally:
        proc.communicate("\n")
    assert nodewire.parse_pgid(written) == (proc.pid, started)
    assert sorted(p.name for p in rundir.iterdir()) == ["node0.pgid"]  # the temporary file was moved, not left


@pytest.mark.parametrize("code", [0, 1, 137])
def test_the_exit_file_the_start_script_writes_parses_back_to_the_code(tmp_path, code):
    proc = _sh(f"(exit {code}); code=$?; " + nodewire.write_exit_sh(str(tmp_path), "node0"))
    proc.communicate()
    assert nodewire.parse_exit((tmp_path / "node0.exit").read_text()) == code
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node0.exit"]


@pytest.mark.parametrize("text", ["", "\n", "x", "1 2", "--1", "1-", "+3", "1_0"])
def test_a_garbled_exit_file_is_none(text):
    assert nodewire.parse_exit(text) is None


def test_the_exit_status_must_be_a_shell_variable_not_text():
    with pytest.raises(ValueError):
        nodewire.write_exit_sh("/tmp/run", "node0", status="0; rm -rf ~")
