"""HTTP routes of the agent, one module per area; :mod:`agent.main` assembles them."""

from typing import Any

from shared.models import ErrorBody

UNAUTHORIZED: dict[int | str, dict[str, Any]] = {401: {"model": ErrorBody, "description": "Missing or wrong bearer token."}}
"""Response declared by every token-protected route."""
TOO_LARGE: dict[int | str, dict[str, Any]] = {413: {"model": ErrorBody, "description": "Request body too large."}}
"""Response declared by every route that takes a body."""
