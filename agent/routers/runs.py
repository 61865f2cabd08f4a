"""``POST /v1/runs/{run_id}/stop``: stop every process of a run on this node."""

import asyncio
from typing import Annotated, Optional

from fastapi import APIRouter, Depends, Path, Query

from shared.models import RunStopResult

from ..dependencies import get_state
from ..reaper import RUN_ID_PATTERN, stop_run
from ..state import AgentState

NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""Node names as the config allows them."""

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("/{run_id}/stop", response_model=RunStopResult, summary="Stop the processes carrying FTWIZ_RUN_ID=run_id and FTWIZ_NODE=this node")
async def stop(
    run_id: Annotated[str, Path(pattern=RUN_ID_PATTERN, max_length=64, description="The run id the launcher set.")],
    state: AgentState = Depends(get_state),
    node: Annotated[
        Optional[str],
        Query(pattern=NODE_NAME_PATTERN, max_length=128, description="The node name the launcher set as FTWIZ_NODE (default: this agent's --node-name)."),
    ] = None,
) -> RunStopResult:
    """SIGTERM to each process group of the run on this node, a grace period, then SIGKILL; reports what is left.

    Only processes whose ``FTWIZ_NODE`` is ``node`` are touched: nodes that share a PID space
    (containers, namespaces) never stop each other's ranks.
    """
    return await asyncio.to_thread(stop_run, run_id, node=node or state.settings.node_name, grace_s=state.settings.stop_grace_s)
