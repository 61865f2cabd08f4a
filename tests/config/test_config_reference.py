"""docs/config-reference.md is what the models say (every key, type, default, description); unknown keys get a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import ConfigError, FtwizConfig, parse_config
from shared.config_reference import REGENERATE, render_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "config-reference.md"


def test_the_reference_is_not_stale():
    assert DOC.is_file(), f"docs/config-reference.md is missing: run `{REGENERATE}`"
    assert DOC.read_text() == render_reference(), f"docs/config-reference.md is stale: run `{REGENERATE}`"


def test_the_reference_names_every_key_of_every_section():
    text = render_reference()
    for section, field in FtwizConfig.model_fields.items():
        model = field.annotation if section != "nodes" else FtwizConfig.model_fields["nodes"].annotation.__args__[0]  # type: ignore[union-attr]
        for key in model.model_fields:
            assert f"| `{key}` |" in text, f"{section}.{key} missing from the reference"


@pytest.mark.parametrize("toml, field, guess", [
    ('[[nodes]]\nname = "a"\nhost = "h"\ngpu = 2\n', "nodes[0].gpu", "'gpus'"),
    ('[[nodes]]\nname = "a"\nhost = "h"\n[job]\nprogres_regex = "x"\n', "job.progres_regex", "'progress_regex'"),
    ('[clustr]\nname = "x"\n[[nodes]]\nname = "a"\nhost = "h"\n', "clustr", "'cluster'"),
])
def test_an_unknown_key_is_answered_with_the_closest_valid_key(toml, field, guess):
    with pytest.raises(ConfigError) as caught:
        parse_config(toml, "ftwiz.toml")
    assert caught.value.field == field and f"did you mean {guess}?" in caught.value.message
    assert "docs/config-reference.md" in caught.value.message


def test_an_unknown_key_far_from_any_names_the_reference():
    with pytest.raises(ConfigError, match="unknown key 'zzzzzz' .every key, with its type and default: docs/config-reference.md"):
        parse_config('[[nodes]]\nname = "a"\nhost = "h"\nzzzzzz = 1\n')
