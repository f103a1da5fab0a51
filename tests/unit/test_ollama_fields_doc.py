"""docs/ollama.md and the Ollama request models agree: every field a model reads has a row in the
field table (``messages[].x`` for a message's fields, ``options.x`` for an option's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from ovserve.dialects.ollama.request import ChatRequest, EmbedRequest, GenerateRequest, Message, Options

DOC = Path(__file__).resolve().parents[2] / "docs" / "ollama.md"
_ROW = re.compile(r"^\| ([^|]+) \| [^|]+ \| [^|]+ \|$")


def documented() -> set[str]:
    """Every backticked name in the first column of a table row; ``options.a``, ``b`` rows name
    ``options.b`` too."""
    names: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        prefix = ""
        for name in re.findall(r"`([^`]+)`", match.group(1)):
            if "." in name:
                prefix = name.rsplit(".", 1)[0] + "."
                names.add(name)
            else:
                names.add(prefix + name)
    return names


@pytest.mark.parametrize(
    ("model", "prefix"),
    [(ChatRequest, ""), (GenerateRequest, ""), (EmbedRequest, ""), (Message, "messages[]."), (Options, "options.")],
)
def test_every_field_has_a_row(model: type[BaseModel], prefix: str) -> None:
    rows = documented()
    missing = [prefix + name for name in model.model_fields if prefix + name not in rows]
    assert missing == [], f"docs/ollama.md has no row for {missing}"
