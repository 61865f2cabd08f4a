"""Dataset and spec checks (pure Python, no torch): every bad input names the file, line and fix."""

from __future__ import annotations

import json

import pytest

from agent.workloads.data import read_records, render
from agent.workloads.errors import WorkloadError
from agent.workloads.spec import load_spec


def _jsonl(tmp_path, *lines: str, raw: bytes | None = None):
    path = tmp_path / "train.jsonl"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("\n".join(lines) + "\n")
    return path


def test_three_shapes_and_blank_lines(tmp_path):
    path = _jsonl(tmp_path,
                  json.dumps({"text": "hello"}),
                  "",
                  json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
                  json.dumps({"instruction": "say", "input": "x", "output": "y"}),
                  json.dumps({"instruction": "say", "output": "y"}))
    records = read_records(path)
    assert [n for n, _ in records] == [1, 3, 4, 5]
    texts = [render(r, chat=None) for _, r in records]
    assert texts[0] == "hello"
    assert texts[1] == "user: hi\nassistant: yo"
    assert "### Input:\nx" in texts[2] and texts[2].endswith("### Response:\ny")
    assert "### Input" not in texts[3]


def test_chat_template_is_used_when_given(tmp_path):
    record = {"messages": [{"role": "user", "content": "hi"}]}
    assert render(record, chat=lambda messages: f"<{messages[0]['content']}>") == "<hi>"


@pytest.mark.parametrize("line, expected", [
    ('{"text": "ok", oops}', "line 2: not valid JSON"),
    ('["text"]', "line 2: expected a JSON object, got list"),
    ('{"prompt": "x"}', "line 2: unknown record shape (keys: prompt)"),
    ('{"text": 5}', 'line 2: "text" must be a string (a int)'),
    ('{"messages": []}', 'line 2: "messages" must be a non-empty list'),
    ('{"messages": [{"role": "user"}]}', "line 2: messages[0] must be an object with string \"role\" and \"content\""),
    ('{"instruction": "x"}', 'line 2: "output" must be a string (missing)'),
    ('{"instruction": "x", "output": "y", "input": 3}', 'line 2: "input" must be a string'),
])
def test_bad_record_names_file_and_line(tmp_path, line, expected):
    path = _jsonl(tmp_path, json.dumps({"text": "fine"}), line)
    with pytest.raises(WorkloadError) as info:
        read_records(path)
    assert str(path) in info.value.message and expected in info.value.message


def test_not_utf8_names_the_line(tmp_path):
    path = _jsonl(tmp_path, raw=b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(WorkloadError, match="line 2: not UTF-8"):
        read_records(path)


def test_missing_empty_and_directory_datasets(tmp_path):
    with pytest.raises(WorkloadError, match="not found"):
        read_records(tmp_path / "nope.jsonl")
    with pytest.raises(WorkloadError, match="has no records"):
        read_records(_jsonl(tmp_path, "", "  "))
    with pytest.raises(WorkloadError, match="is a directory"):
        read_records(tmp_path)


def test_spec_defaults_and_paths(tmp_path):
    spec_path = tmp_path / "job.json"
    spec_path.write_text(json.dumps({"workload": "allreduce", "sizes_mb": [1], "run_id": "r1", "workdir": str(tmp_path / "w"),
                                     "base_dir": str(tmp_path / "b"), "resume": "auto"}))
    spec = load_spec(str(spec_path))
    assert spec["workload"] == "allreduce" and spec["iterations"] == 20 and spec["pause_s"] == 0 and spec.run_id == "r1" and spec.resume == "auto"
    assert spec.input_path("data/x.jsonl") == tmp_path / "b" / "data/x.jsonl"
    assert spec.output_path("ckpt") == tmp_path / "w" / "ckpt"
    assert spec.input_path("/abs/model").as_posix() == "/abs/model"


@pytest.mark.parametrize("content, expected", [
    (None, "not found"),
    ("{not json", "not readable JSON"),
    ("[1]", "expected a JSON object"),
    ('{"method": "qlora4"}', "method = 'qlora4' is not one of full, lora, qlora"),
    ('{"sizes_mb": []}', "sizes_mb must be a list of positive sizes"),
    ('{"seq_len": 0}', "seq_len must be a whole number >= 1"),
    ('{"max_steps": 0}', "max_steps must be -1"),
    ('{"pause_s": -1}', "pause_s must be seconds from 0 to 3600"),
    ('{"pause_s": "1"}', "pause_s must be seconds from 0 to 3600"),
    ('{"resume": 5}', "resume must be"),
])
def test_bad_spec_is_explained(tmp_path, content, expected):
    path = tmp_path / "job.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(WorkloadError) as info:
        load_spec(str(path))
    assert str(path) in info.value.message and expected in info.value.message


@pytest.mark.parametrize(("method", "optim", "kept_out"), [
    ("lora", "adamw_torch", ("datasets", "bitsandbytes")), ("full", "adamw_torch", ("datasets", "bitsandbytes")),
    ("qlora", "adamw_torch", ("datasets",)), ("lora", "adamw_bnb_8bit", ("datasets",)),
    ("full", "paged_adamw_8bit", ("datasets",)),
])
def test_a_built_in_rank_keeps_out_the_libraries_it_never_uses(method, optim, kept_out):
    from agent.workloads.sft import unused_libraries

    assert unused_libraries(method, optim) == kept_out
