"""What trainers print → progress, without touching the user's code (unit tests, no cluster).

Where the lines come from:
- HF 4.x / 5.x log dicts, TRL's and axolotl's keys, the tqdm bar: the forms listed in
  /work/shared/FIELD-NOTES.md ("What trainers print", seen on the development machine with transformers
  5.23) — the TRL and axolotl dicts below are *constructed* from those key lists.
- torchrun's tee of a tqdm bar (``[rank0]:`` glued at the end, a log dict glued after a bar): recorded on
  this machine (torch 2.13.0 CPU, tqdm 4.70.1, ``--tee=3`` with the ``[rank${rank}]:`` prefix).
- LLaMA-Factory records: quoted from hiyouga/LlamaFactory#4350 (a user's trainer_log.jsonl) and #774
  (the older ``learning_rate`` key).
"""

from __future__ import annotations

import re

import pytest

from shared.protocol import Progress, Started
from tui.launch.events import LogLine
from tui.launch.progress import ProgressModel, format_progress, parse_protocol
from tui.launch.trainer_output import (
    BarCollapser,
    is_bar,
    parse_bar,
    parse_log_dict,
    parse_trainer_line,
    regex_progress,
)

HF4 = "{'loss': 2.3125, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.05}"
HF5 = "{'loss': '5.566', 'grad_norm': '1.2', 'learning_rate': '4.5e-05', 'epoch': '0.05'}"
TRL = "{'loss': '5.5', 'grad_norm': '1.1', 'learning_rate': '1e-05', 'num_tokens': '2048', 'mean_token_accuracy': '0.01', 'entropy': '5.5', 'epoch': '0.1'}"
AXOLOTL = "{'loss': 1.25, 'learning_rate': 2e-05, 'epoch': 0.3, 'ppl': 3.49, 'tokens/train_per_sec_per_gpu': 1500.0, 'memory/max_allocated (GiB)': 7.1}"
BAR = " 25%|██▌       | 4/16 [00:02<00:08,  1.36it/s]"
TEE_BAR = " 20%|██        | 1/5 [00:00<00:00,  4.99it/s][rank0]:"
TEE_GLUED = " 80%|████████  | 4/5 [00:00<00:00,  4.97it/s][rank0]:{'loss': '5.566', 'grad_norm': '1.2'}"
LF = ('{"current_steps": 45, "total_steps": 82, "loss": 0.5613, "eval_loss": null, "predict_loss": null, "reward": null, '
      '"accuracy": null, "learning_rate": 6.496815614866792e-06, "epoch": 0.5462822458270106, "percentage": 54.88, '
      '"elapsed_time": "0:29:15", "remaining_time": "0:24:03"}')


@pytest.mark.parametrize("line", [HF4, HF5])
def test_hf_log_dicts_both_forms(line):
    record = parse_trainer_line(line)
    assert isinstance(record, Progress) and record.source == "log_dict"
    assert record.learning_rate == pytest.approx(4.5e-05)
    assert record.epoch == pytest.approx(0.05)
    assert record.step is None  # the Trainer prints no step: the bar gives it


def _line(node: str, rank, text: str, received: float) -> LogLine:
    """A log line as the driver emits it: its protocol record parsed once, at the edge."""
    return LogLine(node, rank, text, received, parse_protocol(text))


def test_log_dict_is_a_literal_never_evaluated():
    assert parse_log_dict("{'loss': __import__('os').system('false')}") is None
    assert parse_log_dict("{'not_a_log': 1}") is None
    assert parse_log_dict("config = {'a': 1") is None


def test_trl_tokens_become_tokens_per_second():
    model = ProgressModel()
    model.update("n0", 0, parse_trainer_line(TRL), now=10.0)
    later = TRL.replace("'2048'", "'6144'")
    model.update("n0", 0, parse_trainer_line(later), now=12.0)
    assert model.snapshot.tokens_per_s == pytest.approx(2048.0)
    assert model.snapshot.loss == pytest.approx(5.5)


def test_trl_tokens_over_the_bars_elapsed_time():
    """Lines arrive in bursts: the rate uses the worker-side elapsed time of the training bar."""
    model = ProgressModel()
    model.update("n0", 0, parse_trainer_line(" 50%|█████     | 4/8 [00:04<00:04,  1.00it/s]"), now=1.0)
    model.update("n0", 0, parse_trainer_line(TRL.replace("'2048'", "'8192'")), now=1.001)
    assert model.snapshot.tokens_per_s == pytest.approx(2048.0)


def test_axolotl_per_gpu_rate_times_ranks():
    model = ProgressModel()
    model.update("n0", 0, Started(rank=0, world_size=4), now=1.0)
    model.update("n0", 0, parse_trainer_line(AXOLOTL), now=2.0)
    assert model.snapshot.tokens_per_s == pytest.approx(6000.0)


def test_tqdm_bar_step_total_eta():
    record = parse_bar(BAR)
    assert record == Progress(source="tqdm", step=4, total_steps=16, eta_s=8.0, elapsed_s=2.0)
    assert parse_bar(TEE_BAR).step == 1
    assert parse_bar("Map:  50%|█████     | 100/200 [00:01<00:01, 99.0 examples/s]") is None
    assert parse_bar("  0%|          | 0/16 [00:00<?, ?it/s]").step == 0


def test_bar_and_log_dict_glued_by_torchrun():
    record = parse_trainer_line(TEE_GLUED)
    assert record.loss == pytest.approx(5.566) and record.step == 4 and record.total_steps == 5


def test_llamafactory_records():
    record = parse_trainer_line(LF)
    assert record.step == 45 and record.total_steps == 82 and record.loss == pytest.approx(0.5613)
    assert record.learning_rate == pytest.approx(6.4968e-06, rel=1e-3)
    assert record.eta_s == 24 * 60 + 3
    newer = '{"current_steps": 3, "total_steps": 10, "loss": 1.5, "lr": 0.0001, "epoch": 0.3, "remaining_time": "0:00:21"}'
    assert parse_trainer_line(newer).learning_rate == pytest.approx(1e-4)


def test_progress_regex_named_groups():
    pattern = re.compile(r"step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>[0-9.]+)")
    assert regex_progress(pattern, "epoch 0 step 7/30 loss 0.125") == Progress(source="progress_regex", step=7, total_steps=30, loss=0.125)
    assert regex_progress(pattern, "nothing here") is None


def test_parse_protocol_prefers_ftwiz_lines_and_ignores_prose():
    assert parse_protocol('{"ftwiz": "progress", "step": 3, "loss": 1.0}') == Progress(step=3, loss=1.0)
    assert parse_protocol("Loading weights... done") is None
    assert parse_protocol(BAR).total_steps == 16


def test_headless_line_from_a_trainer_run():
    model = ProgressModel()
    for now, line in enumerate([" 0%|          | 0/16 [00:00<?, ?it/s]", BAR, HF5, " 31%|███▏      | 5/16 [00:03<00:07,  1.40it/s]"]):
        model.update("n0", 0, parse_protocol(line), now=float(now))
    text = format_progress(model.snapshot)
    assert text.startswith("step 5/16  loss 5.566  lr 4.50e-05") and "ETA" in text


def test_an_eval_bar_does_not_replace_the_training_bar():
    model = ProgressModel()
    model.update("n0", 0, parse_bar(" 50%|█████     | 8/16 [00:04<00:04,  2.00it/s]"), now=1.0)
    model.update("n0", 0, parse_bar(" 33%|███▎      | 1/3 [00:00<00:00,  9.00it/s]"), now=2.0)
    assert (model.snapshot.step, model.snapshot.total_steps) == (8, 16)


def test_collapser_keeps_one_line_per_bar():
    collapse = BarCollapser()
    written: list[str] = []
    for step in range(0, 16):
        written += collapse.feed("n0/0", f"n0/0 | {step * 6}%|█| {step}/16 [00:0{step % 10}<00:01, 1.0it/s][rank0]:", text=f"{step * 6}%|█| {step}/16 [00:01<00:01, 1.0it/s]")
    assert written == []
    written += collapse.feed("n0/0", "n0/0 | {'loss': 1.0}", text="{'loss': 1.0}")
    assert written == ["n0/0 | 90%|█| 15/16 [00:05<00:01, 1.0it/s]", "n0/0 | {'loss': 1.0}"]
    assert collapse.feed("n0/0", "n0/0 | 100%|█| 16/16 [00:16<00:00, 1.0it/s]", text="100%|█| 16/16 [00:16<00:00, 1.0it/s]") == ["n0/0 | 100%|█| 16/16 [00:16<00:00, 1.0it/s]"]
    assert collapse.flush() == [] and is_bar(BAR) and not is_bar(HF4)


def test_headless_printer_prints_a_described_bar_once_and_summarises_the_training_bar():
    """Lines as torchrun's tee delivered them for the TRL script on this machine (see the module docstring)."""
    import io

    from tui.launch.commands import HeadlessPrinter
    from tui.launch.events import ProgressChanged, RunFinished, RunResult

    out = io.StringIO()
    printer = HeadlessPrinter(out=out, err=io.StringIO())
    model = ProgressModel()
    lines = ["Tokenizing train dataset:   0%|          | 0/120 [00:00<?, ? examples/s][rank0]:",
             "Tokenizing train dataset:  50%|█████     | 60/120 [00:00<00:00, 900 examples/s][rank0]:",
             "Tokenizing train dataset: 100%|██████████| 120/120 [00:00<00:00, 1200 examples/s]",
             "  0%|          | 0/8 [00:00<?, ?it/s][rank0]:",
             " 12%|█▎        | 1/8 [00:00<00:03,  2.11it/s][rank0]:{'loss': '6.004', 'grad_norm': '6.353', 'learning_rate': '0.0005', 'epoch': '0.03'}",
             "saving the model"]
    for text in lines:
        printer(_line("node0", 0, text, 0.0))
        obj = parse_protocol(text)
        if obj is not None and model.update("node0", 0, obj):
            printer(ProgressChanged(model.snapshot))
    printer(RunFinished(RunResult("r", "succeeded", 0, reason="ok")))
    printed = out.getvalue().splitlines()
    assert printed[0] == "node0/0 | Tokenizing train dataset: 100%|██████████| 120/120 [00:00<00:00, 1200 examples/s]"
    assert printed[1] == "progress | step 0/8"
    assert printed[2].startswith("progress | step 1/8  loss 6.004  lr 5.00e-04  ep 0.03")
    assert printed[3:] == ["node0/0 | saving the model"]
