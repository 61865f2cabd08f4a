"""The config reference (``docs/config-reference.md``), generated from the pydantic models of ``shared/config.py``.

Every key of every section with its type, default and description, so the document cannot say what the
schema does not. Regenerate after changing a key::

    .venv/bin/python -m shared.config_reference > docs/config-reference.md

``tests/config/test_config_reference.py`` fails while the file differs from what this renders.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from shared.config import ClusterConfig, JobConfig, NcclConfig, NodeConfig, SlurmConfig

__all__ = ["REGENERATE", "render_reference"]

#: The command that rewrites the reference (named by the staleness test).
REGENERATE = ".venv/bin/python -m shared.config_reference > docs/config-reference.md"

_SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("[cluster]", ClusterConfig),
    ("[[nodes]]", NodeConfig),
    ("[job]", JobConfig),
    ("[nccl]", NcclConfig),
    ("[slurm]", SlurmConfig),
]


def render_reference() -> str:
    """The whole reference as Markdown (deterministic: same models, same text)."""
    out = [
        "# ftwiz.toml reference",
        "",
        "Generated from the pydantic models in `shared/config.py`; do not edit by hand. Regenerate with",
        f"`{REGENERATE}`.",
        "A key the schema does not know is an error that names the closest valid key.",
        "",
    ]
    for header, model in _SECTIONS:
        doc = (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else ""
        out += [f"## `{header}`", "", doc.replace("``", "`"), "",
                "| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            out.append(f"| `{name}` | {_cell(_type(field))} | {_cell(_default(field))} | {_cell(field.description or '')} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _type(field: FieldInfo) -> str:
    text = repr(field.annotation) if not isinstance(field.annotation, type) else field.annotation.__name__
    for noise in ("typing.", "Literal", "NoneType"):
        text = text.replace(noise, "None" if noise == "NoneType" else "" if noise == "typing." else noise)
    return f"`{text}`"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_reference())
