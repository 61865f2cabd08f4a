"""``POST /v1/runs/{run_id}/stop``: stop every process of a run on this node."""

import asyncio
from typing import Annotated, Optional

from fastapi import APIRouter, Depends, Path, Query

from shared.models import RunStopResult
from shared.nodewire import NODE_ENV, NODE_NAME_PATTERN, RUN_ENV, RUN_ID_PATTERN

from ..dependencies import get_state
from ..reaper import stop_run
from ..state import AgentState

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("/{run_id}/stop", response_model=RunStopResult, summary=f"Stop the processes carrying {RUN_ENV}=run_id and {NODE_ENV}=this node")
async def stop(
    run_id: Annotated[str, Path(pattern=RUN_ID_PATTERN, max_length=64, description="The run id the launcher set.")],
    state: AgentState = Depends(get_state),
    node: Annotated[
        Optional[str],
        Query(pattern=NODE_NAME_PATTERN, max_length=63, description=f"The node name the launcher set as {NODE_ENV} (default: this agent's --node-name)."),
    ] = None,
) -> RunStopResult:
    """SIGTERM to each process group of the run on this node, a grace period, then SIGKILL; reports what is left.

    Only processes whose ``FTWIZ_NODE`` is ``node`` are touched: nodes that share a PID space
    (containers, namespaces) never stop each other's ranks.
    """
    return await asyncio.to_thread(stop_run, run_id, node=node or state.settings.node_name, grace_s=state.settings.stop_grace_s)
