"""``GET /v1/report`` and ``POST /v1/refresh``."""

import asyncio

from fastapi import APIRouter, Depends, Response

from shared.models import NodeReport, RefreshResult

from ..dependencies import get_state
from ..state import AgentState

router = APIRouter(prefix="/v1", tags=["report"])

REFRESH_MIN_INTERVAL_S = 2.0
"""A software probe that finished less than this ago is reused: each probe starts the training interpreter."""


@router.get("/report", response_model=NodeReport, summary="Everything this agent knows about its node")
async def report(state: AgentState = Depends(get_state)) -> Response:
    """The latest sample as a :class:`NodeReport`; never waits on NVML or a subprocess."""
    return Response(content=state.reports.report_json(), media_type="application/json")


@router.post("/refresh", response_model=RefreshResult, summary="Re-probe NVML and the training interpreter now")
async def refresh(state: AgentState = Depends(get_state)) -> RefreshResult:
    """Re-initialise NVML, take a sample and re-probe software versions (waits for the probe)."""
    sampler = state.sampler
    await asyncio.to_thread(sampler.refresh_hardware)
    software, refreshed = await asyncio.to_thread(sampler.refresh_software, max_age_s=REFRESH_MIN_INTERVAL_S)
    return RefreshResult(refreshed=refreshed, software=software)
