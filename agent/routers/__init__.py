"""HTTP routes of the agent, one module per area; :mod:`agent.main` assembles them."""

from shared.models import ErrorBody

UNAUTHORIZED = {401: {"model": ErrorBody, "description": "Missing or wrong bearer token."}}
"""Response declared by every token-protected route."""
TOO_LARGE = {413: {"model": ErrorBody, "description": "Request body too large."}}
"""Response declared by every route that takes a body."""
