"""``GET /metrics``: Prometheus text exposition of the latest sample."""

from fastapi import APIRouter, Depends, Response

from ..dependencies import get_state
from ..state import AgentState

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Text exposition format 0.0.4."}},
)
async def metrics(state: AgentState = Depends(get_state)) -> Response:
    """Per-GPU gauges labelled ``gpu``/``uuid``, host, disk and network gauges, agent process metrics."""
    from ..metrics import CONTENT_TYPE, render  # prometheus_client, once something scrapes

    return Response(content=render(state.registry), media_type=CONTENT_TYPE)
