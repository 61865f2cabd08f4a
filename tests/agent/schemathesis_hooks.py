"""Hooks for the schemathesis run against a live agent (loaded through SCHEMATHESIS_HOOKS).

Generated listen probes would otherwise hold random ports on this shared machine for up to two
minutes; valid ones are moved into a small private range with a short time to live. Invalid
values are left alone so the agent's 422 handling is still exercised.
"""

import os

import schemathesis

LISTEN_BASE = int(os.environ.get("FTWIZ_ST_LISTEN_BASE", "47100"))
LISTEN_SPAN = 16


@schemathesis.hook
def map_body(ctx, body):
    """Keep listen probes in [LISTEN_BASE, LISTEN_BASE + LISTEN_SPAN) and at most 0.5 s."""
    if ctx.operation.path != "/v1/probe/listen" or not isinstance(body, dict):
        return body
    port, ttl = body.get("port"), body.get("ttl_s")
    if isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
        body["port"] = LISTEN_BASE + port % LISTEN_SPAN
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and 0 < ttl <= 120:
        body["ttl_s"] = min(ttl, 0.5)
    return body
