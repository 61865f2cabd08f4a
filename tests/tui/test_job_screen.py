"""Job step: schema errors under their field, valid edits reach the config and move the estimate."""

from __future__ import annotations

from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.job_screen import JobScreen
from tui.app.widgets.job.job_form import JobForm


def _peak(screen: JobScreen) -> str:
    text = flat_text(screen.app)
    start = text.index("Per-GPU peak ≈")
    return text[start:start + 30]


async def test_invalid_value_is_shown_and_not_applied(make_app):
    app = make_app(poll_interval=5, start_step="job")
    async with app.run_test(size=(100, 34)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen) and app.cluster.polls >= 1, what="the job step")
        form = app.screen.query_one(JobForm)
        form.query_one("#job-seq_len").value = "4"
        await pilot.pause()
        assert form.errors == {"seq_len": "Input should be greater than or equal to 8"}
        assert form.query_one("#job-error-seq_len").has_class("-shown")
        text = screen_text(app)
        assert "seq_len: Input should be" in text  # under the field (the rest wraps)
        assert "Not applied: fix seq_len" in text
        assert app.config.job.seq_len == 2048 and not app.dirty
        form.query_one("#job-seq_len").value = "abc"
        await pilot.pause()
        assert form.errors == {"seq_len": "Input should be a valid integer, unable to parse string as an integer"}
        form.query_one("#job-seq_len").value = "4096"
        await pilot.pause()
        assert form.errors == {} and not form.query_one("#job-error-seq_len").has_class("-shown")
        assert "seq_len:" not in screen_text(app)
        assert app.config.job.seq_len == 4096 and app.dirty


async def test_method_change_updates_the_estimate_and_verdicts(make_app):
    app = make_app(poll_interval=5, start_step="job")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen) and app.cluster.polls >= 1, what="the job step")
        await wait_for(pilot, lambda: "node0 GPU" in flat_text(app) and "node1 GPU0" in flat_text(app), what="the fit bars")
        qlora_peak = _peak(app.screen)
        app.screen.query_one("#job-method").value = "full"
        await pilot.pause()
        await wait_for(pilot, lambda: _peak(app.screen) != qlora_peak, what="a new estimate")
        assert app.config.job.method == "full"
        text = flat_text(app)
        assert "won't fit" in text  # full fine-tuning of 7B does not fit a 24 GB RTX 4090
        assert "→ method = " in text  # with the biggest lever


async def test_tab_reaches_every_field(make_app):
    app = make_app(poll_interval=5, start_step="job")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="the job step")
        seen = set()
        for _ in range(40):
            focused = app.focused
            if focused is not None and focused.id:
                seen.add(focused.id)
            await pilot.press("tab")
        assert {"job-workload", "job-model", "job-seq_len", "job-learning_rate", "job-lora_r", "job-precision", "job-output_dir", "job-save_steps"} <= seen
