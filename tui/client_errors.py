"""What a failed call to an agent means, in one sentence (the wording :class:`tui.client.AgentClient` uses)."""

from __future__ import annotations

import errno
from typing import Optional

import httpx

__all__ = ["network_message", "response_detail", "root_oserror"]


def response_detail(response: httpx.Response) -> str:
    """The agent's error detail from a failed response (FastAPI's ``detail``, else the start of the body)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:300]
    return str(body)[:200]


def root_oserror(exc: BaseException) -> Optional[OSError]:
    """The OSError under an httpx/httpcore exception chain (it carries the errno)."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 10:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def network_message(exc: httpx.HTTPError, url: str, timeout: float) -> str:
    """One sentence for a call that got no HTTP answer: timed out, refused, no route, or what the OS said."""
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {url} within {timeout:g} s"
    root = root_oserror(exc)
    if root is not None:
        if root.errno == errno.ECONNREFUSED:
            return f"connection to {url} refused: no agent listening there"
        if root.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"no route to {url}: the node is off or its link is down"
        return f"cannot connect to {url}: {root.strerror or root}"
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return f"connection to {url} refused: no agent listening there"
    return f"cannot connect to {url}: {text}"
