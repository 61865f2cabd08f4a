"""Request dependencies: the bearer-token check and access to the agent's state."""

from __future__ import annotations

import hmac
from typing import Any, Callable, Coroutine, Optional

from fastapi import HTTPException, Request, Security, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from .state import AgentState

__all__ = ["require_token", "get_state", "bearer_scheme", "no_coercion"]

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="agentToken",
    description="The shared agent token from the agent's --token-file.",
)


async def get_state(request: Request) -> AgentState:
    """The running agent's state (async: FastAPI would run a plain function in a worker thread)."""
    return request.app.state.agent


async def require_token(
    request: Request, credentials: Optional[HTTPAuthorizationCredentials] = Security(bearer_scheme)
) -> None:
    """401 unless ``Authorization: Bearer <token>`` carries the agent token (constant-time compare)."""
    expected = request.app.state.agent.settings.token_bytes
    presented = credentials.credentials.encode("utf-8", errors="replace") if credentials else b""
    # compare_digest on the full value also when the header is missing keeps timing uniform.
    if not hmac.compare_digest(presented, expected) or credentials is None:
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or wrong agent token: send 'Authorization: Bearer <token>' with the token from the agent's --token-file",
            headers={"WWW-Authenticate": 'Bearer realm="ftwiz-agent"'},
        )


def no_coercion(model: type[BaseModel]) -> Callable[[Request], Coroutine[Any, Any, None]]:
    """A dependency refusing JSON that pydantic's lax mode would coerce against the schema.

    Lax validation turns ``true`` into ``1`` and ``"80"`` into ``80``; the OpenAPI schema says
    number, so such a body is bad input (422), not a request to guess at.
    """
    numeric = {name for name, field in model.model_fields.items() if field.annotation in (int, float)}

    async def check(request: Request) -> None:
        try:
            body = await request.json()
        except ValueError:
            return  # FastAPI has already answered 422 for unparseable JSON
        if not isinstance(body, dict):
            return
        errors = [
            {
                "type": "number_type",
                "loc": ("body", name),
                "msg": "Input should be a number, not a boolean or a string",
                "input": body[name],
            }
            for name in sorted(numeric & body.keys())
            if isinstance(body[name], (bool, str))
        ]
        if errors:
            raise RequestValidationError(errors)

    return check
