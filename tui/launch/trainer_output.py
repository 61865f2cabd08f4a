"""Progress from what the common trainers already print: no change to the user's code.

:func:`parse_trainer_line` turns one worker line (the torchrun ``[rankN]:`` prefix already split off)
into a protocol :class:`shared.protocol.Progress` record (its ``source`` names the form), or None. It knows:

- **HF Trainer / TRL / axolotl log dicts** on stdout, printed by global rank 0 with no step number:
  transformers 4.x ``{'loss': 2.3125, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.05}``
  and 5.x with the numbers as strings ``{'loss': '5.566', ...}``. Parsed with
  :func:`ast.literal_eval` (never ``eval``). TRL's cumulative ``num_tokens`` is passed on as
  ``num_tokens`` (the progress model turns it into tokens/s); axolotl's
  ``tokens/train_per_sec_per_gpu`` as ``tokens_per_s_per_gpu``.
- **tqdm bars** ``' 25%|██▌       | 4/16 [00:02<00:08,  1.36it/s]'`` for step, total and ETA. Only a
  bar without a description counts (HF's training bar has none; ``Map:``, ``Loading checkpoint
  shards:`` and the like are other work). torchrun's tee splits the ``\\r`` updates into lines and may
  leave a ``[rankN]:`` on the end, which is ignored.
- **LLaMA-Factory** ``trainer_log.jsonl`` records (``current_steps``, ``total_steps``, ``loss``,
  ``lr``, ``epoch``, ``remaining_time``), as the node-side tail prints them.

The forms come from the trainers' own printing code (transformers ``ProgressCallback.on_log`` and
tqdm's ``format_meter``; LLaMA-Factory ``LogCallback``) and the lines listed in FIELD-NOTES.md.

:func:`regex_progress` applies a user's ``[job].progress_regex``; :class:`BarCollapser` keeps log
files readable by writing one line per bar instead of one per ``\\r`` update (transformers#28683).
Pure: no I/O.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from shared.protocol import Progress

__all__ = ["BarCollapser", "is_bar", "parse_bar", "parse_log_dict", "parse_trainer_line", "regex_progress"]

# `` 25%|██▌       | 4/16 [00:02<00:08,  1.36it/s]``; ``100%|...| 16/16 [00:11<00:00, 1.40it/s]``;
# the first update reads ``  0%|          | 0/16 [00:00<?, ?it/s]``.
_BAR = re.compile(
    r"(?P<pre>^|.*?)(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>[0-9:]+)<(?P<remaining>[0-9:?]+)"
)
_TRAILING_PREFIX = re.compile(r"(\[rank\d+\]:)+\s*$")
# Keys that make a dict a trainer log record (not any dict a script happens to print).
_LOG_KEYS = frozenset({"loss", "train_loss", "learning_rate", "grad_norm", "epoch"})


def parse_trainer_line(text: str) -> Optional[Progress]:
    """A ``progress`` record from one trainer line, or None (see the module docstring)."""
    record = parse_log_dict(text) if "{" in text else None
    bar = parse_bar(text[:_dict_start(text)] if record is not None else text) if "%|" in text else None
    if record is not None and bar is not None:  # a bar and a log dict glued into one line by torchrun's tee
        said: dict[str, Any] = {"step": bar.step, "total_steps": bar.total_steps, "eta_s": bar.eta_s, "elapsed_s": bar.elapsed_s}
        return replace(record, **{key: value for key, value in said.items() if value is not None})
    return record or bar


def parse_log_dict(text: str) -> Optional[Progress]:
    """An HF/TRL/axolotl log dict or a LLaMA-Factory record in ``text`` as a progress record, or None."""
    start = _dict_start(text)
    if start < 0:
        return None
    end = text.rfind("}")
    if end < start:
        return None
    literal = text[start:end + 1]
    try:
        value = ast.literal_eval(literal) if literal.startswith("{'") else json.loads(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    if "current_steps" in value:
        return _llamafactory(value)
    if not _LOG_KEYS & set(value):
        return None
    out: dict[str, Any] = {"source": "log_dict"}
    _put(out, "loss", _number(value.get("loss")))  # not the summary's train_loss: a run mean, not the latest loss
    _put(out, "learning_rate", _number(value.get("learning_rate")))
    _put(out, "epoch", _number(value.get("epoch")))
    _put(out, "grad_norm", _number(value.get("grad_norm")))
    _put(out, "num_tokens", _number(value.get("num_tokens")))
    _put(out, "tokens_per_s_per_gpu", _number(value.get("tokens/train_per_sec_per_gpu")))
    _put(out, "tokens_per_s", _number(value.get("train_tokens_per_second")))
    step = _number(value.get("step"))
    if step is not None and step == int(step):
        out["step"] = int(step)
    return Progress(**out) if len(out) > 1 else None


def _dict_start(text: str) -> int:
    starts = [i for i in (text.find("{'"), text.find('{"')) if i >= 0]
    return min(starts) if starts else -1


def _llamafactory(value: dict[str, Any]) -> Optional[Progress]:
    out: dict[str, Any] = {"source": "llamafactory"}
    step, total = _number(value.get("current_steps")), _number(value.get("total_steps"))
    if step is not None:
        out["step"] = int(step)
    if total is not None:
        out["total_steps"] = int(total)
    _put(out, "loss", _number(value.get("loss")))
    _put(out, "learning_rate", _number(value.get("lr", value.get("learning_rate"))))  # "learning_rate" before 0.8
    _put(out, "epoch", _number(value.get("epoch")))
    remaining = value.get("remaining_time")
    if isinstance(remaining, str):
        _put(out, "eta_s", _clock_seconds(remaining))
    return Progress(**out) if "step" in out else None


def parse_bar(text: str) -> Optional[Progress]:
    """A tqdm training bar (no description) as step / total / ETA, or None."""
    text = _TRAILING_PREFIX.sub("", text)
    # torchrun may glue two updates into one line: the last one is the news.
    matches = list(_BAR.finditer(text))
    if not matches:
        return None
    match = matches[-1]
    pre = match.group("pre")
    if len(matches) == 1 and pre.strip():
        return None  # a described bar (``Map:``, ``Loading checkpoint shards:``): not the training loop
    total = int(match.group("total"))
    if total <= 0:
        return None
    return Progress(source="tqdm", step=int(match.group("n")), total_steps=total, eta_s=_clock_seconds(match.group("remaining")),
                    elapsed_s=_clock_seconds(match.group("elapsed")))


def is_bar(text: str) -> bool:
    """Whether ``text`` is a tqdm bar update (any bar, described or not)."""
    return "%|" in text and _BAR.search(_TRAILING_PREFIX.sub("", text)) is not None


def regex_progress(pattern: "re.Pattern[str]", text: str) -> Optional[Progress]:
    """A progress record from ``[job].progress_regex`` (named groups step, total, loss, lr, epoch)."""
    match = pattern.search(text)
    if match is None:
        return None
    groups = match.groupdict()
    out: dict[str, Any] = {"source": "progress_regex"}
    for name, key in (("step", "step"), ("total", "total_steps")):
        number = _number(groups.get(name))
        if number is not None:
            out[key] = int(number)
    _put(out, "loss", _number(groups.get("loss")))
    _put(out, "learning_rate", _number(groups.get("lr")))
    _put(out, "epoch", _number(groups.get("epoch")))
    return Progress(**out) if len(out) > 1 else None


def _put(out: dict[str, Any], key: str, value: Optional[float]) -> None:
    if value is not None:
        out[key] = value


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if value == value else None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if number == number else None
    return None


def _clock_seconds(text: str) -> Optional[float]:
    """``'01:02:03'``, ``'2:03'`` or ``'0:03:10'`` → seconds; ``'?'`` → None."""
    parts = text.strip().split(":")
    if not parts or not all(p.isdigit() for p in parts):
        return None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds


@dataclass
class BarCollapser:
    """Keeps log files readable: of a run of tqdm updates from one source, write only the last.

    Feed each line with :meth:`feed`; it returns the lines to write now. A bar update is held back
    and replaced by the next one from the same source (node/rank); it is written when anything else
    comes from that source, when the bar reaches its total, or by :meth:`flush` at the end. So a
    1,000-step bar costs a line per interruption instead of a thousand.
    """

    held: dict[str, str] = field(default_factory=dict)
    """Source → its last bar update not written yet."""

    def feed(self, source: str, line: str, text: Optional[str] = None) -> list[str]:
        """Lines to write for ``line`` (``text`` is the line without its display prefix, if it has one)."""
        body = line if text is None else text
        counts = _bar_counts(body) if "%|" in body else None
        if counts is not None:
            if counts[0] == counts[1]:
                self.held.pop(source, None)
                return [_clean_bar(line)]
            self.held[source] = _clean_bar(line)
            return []
        out = []
        if source in self.held:
            out.append(self.held.pop(source))
        out.append(line)
        return out

    def flush(self) -> list[str]:
        """Every held bar (the run ended)."""
        out = list(self.held.values())
        self.held.clear()
        return out


def _bar_counts(text: str) -> Optional[tuple[int, int]]:
    """(n, total) of the last bar update in ``text``, described or not; None when it is no bar."""
    matches = list(_BAR.finditer(_TRAILING_PREFIX.sub("", text)))
    if not matches:
        return None
    return int(matches[-1].group("n")), int(matches[-1].group("total"))


def _clean_bar(line: str) -> str:
    return _TRAILING_PREFIX.sub("", line).rstrip()
