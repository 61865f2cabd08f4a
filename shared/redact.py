"""Which ``[job].env`` / ``[nccl].env`` values are secrets, and how ftwiz shows them: masked.

A key *looks secret* when it contains ``TOKEN``, ``SECRET``, ``KEY`` or ``PASSWORD`` (any case): ``HF_TOKEN``,
``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``. Their values reach the nodes as they are (the job
needs them) in files only the user can read, and appear in ``run.json``, the controller's logs and on screen as
:data:`MASK`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MASK", "SECRET_WORDS", "looks_secret", "masked_config", "masked_env", "redact", "secret_values"]

#: What a secret value is shown as.
MASK = "***"
#: A key holding one of these words (case-insensitive) holds a secret.
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD")
#: Values shorter than this are not searched for in log text (masking every "1" would garble the logs).
_MIN_REDACTED = 4


def looks_secret(key: str) -> bool:
    """True when ``key`` names a secret (see the module docstring)."""
    upper = key.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking keys replaced by :data:`MASK`."""
    return {key: MASK if looks_secret(key) and value else value for key, value in env.items()}


def secret_values(*envs: Mapping[str, str]) -> tuple[str, ...]:
    """The values of the secret-looking keys of ``envs``, longest first (what :func:`redact` hides)."""
    values = {value for env in envs for key, value in env.items() if looks_secret(key) and len(value) >= _MIN_REDACTED}
    return tuple(sorted(values, key=lambda value: (-len(value), value)))


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``values`` replaced by :data:`MASK`."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def masked_config(config: Any) -> Any:
    """A dumped ``FtwizConfig`` (a dict) with ``job.env`` and ``nccl.env`` masked; anything else is returned as it is."""
    if not isinstance(config, dict):
        return config
    out = dict(config)
    for section in ("job", "nccl"):
        part = out.get(section)
        if isinstance(part, dict) and isinstance(part.get("env"), dict):
            out[section] = {**part, "env": masked_env(part["env"])}
    return out
