"""The checklist step's mesh panel: after a quick pass it shows the cached matrix's age and measures the full
mesh in the background (the checklist engine is a stand-in returning constructed matrices)."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.meshplan import Link, MeshMatrix, MeshRun
from tests.tui.screen_text import screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.checklist_screen import ChecklistScreen
from tui.checks import CheckResult
from tui.checks.engine import ChecklistRun


def _mesh(gbit: float) -> MeshMatrix:
    names = ["node0", "node1"]
    links = [Link(src=a, dst=b, gbit_per_s=gbit, latency_ms=0.2) for a in names for b in names if a != b]
    return MeshMatrix(nodes=names, links=links, rounds=1)


async def test_quick_pass_shows_the_cached_age_then_the_background_full_mesh(make_app):
    calls: list[dict[str, Any]] = []
    release = asyncio.Event()

    async def engine(config: Any, **kw: Any) -> ChecklistRun:
        calls.append(kw)
        row = CheckResult(id="net.mesh", title="mesh", status="pass", detail="quick pass")
        if (kw.get("options") or {}).get("mesh") == "full":
            await release.wait()
            return ChecklistRun([row], mesh=_mesh(7.5), mesh_run=MeshRun(mode="full", age_s=0.0, reason="asked for"))
        return ChecklistRun([row], mesh=_mesh(2.5), mesh_run=MeshRun(mode="quick", age_s=600.0, reason="agrees"))

    app = make_app(poll_interval=2, start_step="checklist", engines={"run_checklist": engine})
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.checks.mesh_refreshing, what="the background full mesh", timeout=30)
        text = screen_text(app)
        assert "full mesh, measured 10 min ago" in text and "measuring every pair again in the background" in text, text
        assert calls[-1]["only"] == ["net.mesh"] and calls[-1]["options"] == {"mesh": "full"}
        release.set()
        await wait_for(pilot, lambda: not app.checks.mesh_refreshing and "measured just now" in screen_text(app),
                       what="the fresh full mesh", timeout=30)
        assert app.checks.mesh.link("node0", "node1").gbit_per_s == 7.5
        assert [r.detail for r in app.checks.results] == ["quick pass"]  # the rows stay those of the checklist run
        assert len(calls) == 2
