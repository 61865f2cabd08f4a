"""``GET /healthz``: liveness without a token (load balancers, ``ftwiz --check`` before auth)."""

from fastapi import APIRouter, Depends

from shared.models import Health
from shared.version import __version__

from ..dependencies import get_state
from ..state import AgentState

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness, version and node name (no token)")
async def healthz(state: AgentState = Depends(get_state)) -> Health:
    """Always answers while the agent runs; carries no hardware data."""
    return Health(version=__version__, node_name=state.settings.node_name)
