"""``POST /v1/runs/{run_id}/stop``: stop every process of a run on this node."""

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from shared.models import RunStopResult

from ..dependencies import get_state
from ..reaper import RUN_ID_PATTERN, stop_run
from ..state import AgentState

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("/{run_id}/stop", response_model=RunStopResult, summary="Stop the processes carrying FTWIZ_RUN_ID=run_id and FTWIZ_NODE=this node")
async def stop(
    run_id: Annotated[str, Path(pattern=RUN_ID_PATTERN, max_length=64, description="The run id the launcher set.")],
    state: AgentState = Depends(get_state),
) -> RunStopResult:
    """SIGTERM to each process group of the run, a grace period, then SIGKILL; reports what is left."""
    return await asyncio.to_thread(stop_run, run_id, node=state.settings.node_name, grace_s=state.settings.stop_grace_s)
