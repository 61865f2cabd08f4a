"""The sft dataset: JSONL records checked line by line, rendered to text, tokenised, batched.

Three record shapes, one JSON object per line (blank lines are skipped, shapes may be mixed):

- ``{"text": "..."}``
- ``{"messages": [{"role": "user", "content": "..."}, ...]}`` — through the tokenizer's chat template
  when it has one, else ``role: content`` lines;
- ``{"instruction": "...", "input": "...", "output": "..."}`` (``input`` optional) — an Alpaca-style prompt.

The loss covers the whole rendered text (prompts included). A bad record stops the run before any
training with the file, the line number, what is wrong and what a good record looks like.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from .errors import WorkloadError

SHAPES_HINT = 'each line must be one JSON object: {"text": ...}, {"messages": [{"role": ..., "content": ...}]} or {"instruction": ..., "input": ..., "output": ...}'


def read_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line_number, record)`` for every non-blank line of ``path``; WorkloadError on the first bad one."""
    if not path.exists():
        raise WorkloadError(f"dataset {path} not found: set [job] dataset to a JSONL file on every node (relative paths start at the run's base dir)")
    if path.is_dir():
        raise WorkloadError(f"dataset {path} is a directory: [job] dataset must be one JSONL file")
    records = []
    with path.open("rb") as handle:  # bytes, decoded per line, so a bad byte is reported on its own line
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(f"{path} line {number}: not UTF-8 text ({exc.reason}); save the dataset as UTF-8") from None
            if line.strip():
                records.append((number, _parse(path, number, line)))
    if not records:
        raise WorkloadError(f"dataset {path} has no records: {SHAPES_HINT}")
    return records


def _parse(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path} line {number}: not valid JSON ({exc.msg} at column {exc.colno}); {SHAPES_HINT}") from None
    where = f"{path} line {number}"
    if not isinstance(record, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {type(record).__name__}; {SHAPES_HINT}")
    if "text" in record:
        _need_str(where, record, "text")
    elif "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise WorkloadError(f'{where}: "messages" must be a non-empty list of {{"role": ..., "content": ...}} objects')
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
                raise WorkloadError(f'{where}: messages[{i}] must be an object with string "role" and "content" (got {json.dumps(message)[:80]})')
    elif "instruction" in record or "output" in record:
        _need_str(where, record, "instruction")
        _need_str(where, record, "output")
        if record.get("input") is not None and not isinstance(record["input"], str):
            raise WorkloadError(f'{where}: "input" must be a string when present')
    else:
        keys = ", ".join(sorted(record)) or "none"
        raise WorkloadError(f"{where}: unknown record shape (keys: {keys}); {SHAPES_HINT}")
    return record


def _need_str(where: str, record: dict[str, Any], key: str) -> None:
    if not isinstance(record.get(key), str):
        got = "missing" if key not in record else f"a {type(record[key]).__name__}"
        raise WorkloadError(f'{where}: "{key}" must be a string ({got})')


def render(record: dict[str, Any], chat: Optional[Callable[[list[dict[str, str]]], str]]) -> str:
    """The training text of one checked record; ``chat`` renders messages (the tokenizer's template)."""
    if "text" in record:
        return record["text"]
    if "messages" in record:
        if chat is not None:
            return chat(record["messages"])
        return "\n".join(f"{m['role']}: {m['content']}" for m in record["messages"])
    prompt = f"### Instruction:\n{record['instruction']}\n\n"
    if record.get("input"):
        prompt += f"### Input:\n{record['input']}\n\n"
    return prompt + f"### Response:\n{record['output']}"


def tokenize_records(records: list[tuple[int, dict[str, Any]]], tokenizer, seq_len: int) -> list[list[int]]:
    """Token ids per record: rendered, truncated to ``seq_len``, ending in EOS when it fits."""
    chat: Optional[Callable[[list[dict[str, str]]], str]] = None
    if getattr(tokenizer, "chat_template", None):
        chat = partial(tokenizer.apply_chat_template, tokenize=False)
    eos = tokenizer.eos_token_id
    examples = []
    for number, record in records:
        try:
            text = render(record, chat)
        except Exception as exc:  # a template that rejects this conversation (e.g. roles out of order)
            raise WorkloadError(f"record at line {number}: the tokenizer's chat template rejected it: {exc}") from None
        ids = tokenizer(text, add_special_tokens=True, truncation=True, max_length=seq_len)["input_ids"]
        if eos is not None and (not ids or ids[-1] != eos) and len(ids) < seq_len:
            ids = [*ids, eos]
        if ids:
            examples.append(ids)
    return examples


class PaddingCollator:
    """Pad a batch to its longest example; labels are the ids with padding masked (-100)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        longest = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, example in enumerate(batch):
            n = len(example["input_ids"])
            ids[row, :n] = torch.tensor(example["input_ids"], dtype=torch.long)
            mask[row, :n] = 1
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class TokenDataset:
    """A list of token-id lists as a map-style dataset of ``{"input_ids": [...]}``."""

    def __init__(self, examples: list[list[int]]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"input_ids": self.examples[index]}
