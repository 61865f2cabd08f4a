"""Request dependencies: the bearer-token check and access to the agent's state."""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi import HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .state import AgentState

__all__ = ["require_token", "get_state", "bearer_scheme"]

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="agentToken",
    description="The shared agent token from the agent's --token-file.",
)


def get_state(request: Request) -> AgentState:
    """The running agent's state."""
    return request.app.state.agent


async def require_token(
    request: Request, credentials: Optional[HTTPAuthorizationCredentials] = Security(bearer_scheme)
) -> None:
    """401 unless ``Authorization: Bearer <token>`` carries the agent token (constant-time compare)."""
    expected = get_state(request).settings.token_bytes
    presented = credentials.credentials.encode("utf-8", errors="replace") if credentials else b""
    # compare_digest on the full value also when the header is missing keeps timing uniform.
    if not hmac.compare_digest(presented, expected) or credentials is None:
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or wrong agent token: send 'Authorization: Bearer <token>' with the token from the agent's --token-file",
            headers={"WWW-Authenticate": 'Bearer realm="ftwiz-agent"'},
        )
