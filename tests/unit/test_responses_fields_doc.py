"""docs/responses-fields.md and the code agree: every Responses field has a row, and its tests exist."""

from __future__ import annotations

import re
from pathlib import Path

from ovserve.dialects.openai.request import SamplingRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "responses-fields.md"
# A row of the request table: | `field`[, `field`...] | status | behaviour | tests |
_ROW = re.compile(r"^\| ((?:`[^`]+`(?:, )?)+) \| ([^|]+) \|")
# The sampling fields shared with chat are one row ("OVMS sampling extensions"); these have their own.
OWN_ROWS = {"model", "stream", "temperature", "top_p", "n"}


def documented_fields() -> set[str]:
    fields: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is not None:
            # `text.format` documents the field `text` (one row per sub-field).
            fields.update(name.split(".")[0] for name in re.findall(r"`([^`]+)`", match[1]))
    return fields


def test_every_responses_field_has_a_row() -> None:
    expected = (set(ResponsesRequest.model_fields) - set(SamplingRequest.model_fields)) | OWN_ROWS
    assert expected - documented_fields() == set()


def test_every_test_the_document_names_exists() -> None:
    sources = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    defined = set(re.findall(r"^(?:async )?def (test_\w+)\(", sources, flags=re.MULTILINE))
    named = set(re.findall(r"`(test_\w+)`", DOC.read_text(encoding="utf-8")))
    assert named and named <= defined, sorted(named - defined)
