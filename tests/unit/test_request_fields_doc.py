"""docs/request-fields.md and the code agree: every field has a row, the right status, and tests."""

from __future__ import annotations

import re
from pathlib import Path

from ovserve.api.field_policy import FIELD_RULES, Endpoint
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.request import CompletionRequest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "request-fields.md"
_ROW = re.compile(r"^\| `([^`]+)`( \((?:header|query)\))? \| (chat|completions|both) \| (\w+) \|.*\| ([^|]+) \|$")


def doc_rows() -> dict[tuple[str, str], tuple[str, list[str]]]:
    """(field, endpoint) -> (status, tests), one entry per endpoint a row covers."""
    rows: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        name, _, endpoints, status, tests = match.groups()
        names = re.findall(r"`(test_\w+)`", tests)
        for endpoint in ("chat", "completions") if endpoints == "both" else (endpoints,):
            assert (name, endpoint) not in rows, f"{name} ({endpoint}) has two rows"
            rows[(name, endpoint)] = (status, names)
    return rows


def test_every_modelled_field_has_a_row() -> None:
    rows = doc_rows()
    rules = {(rule.name, endpoint.value) for rule in FIELD_RULES for endpoint in rule.endpoints}
    for endpoint, model in (("chat", ChatCompletionRequest), ("completions", CompletionRequest)):
        for name in model.model_fields:
            assert (name, endpoint) in rows, f"docs/request-fields.md has no row for {name} ({endpoint})"
            if (name, endpoint) not in rules:
                assert rows[(name, endpoint)][0] == "supported", name


def test_every_field_rule_has_a_row_with_its_treatment() -> None:
    rows = doc_rows()
    for rule in FIELD_RULES:
        for endpoint in rule.endpoints:
            key = (rule.name, endpoint.value)
            assert key in rows, f"docs/request-fields.md has no row for {rule.name} ({endpoint.value})"
            assert rows[key][0] == rule.treatment.value, rule.name
        for endpoint in set(Endpoint) - rule.endpoints:
            # A rule for one endpoint only: the other endpoint's row, if any, is a modelled field there.
            modelled = {"chat": ChatCompletionRequest, "completions": CompletionRequest}[endpoint.value].model_fields
            assert (rule.name, endpoint.value) not in rows or rule.name in modelled, rule.name


def test_every_row_names_tests_that_exist() -> None:
    sources = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)\(", sources, flags=re.MULTILINE))
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", text))
    assert named, "no test named in the document"
    assert named <= defined, f"tests named in docs/request-fields.md but not defined: {sorted(named - defined)}"
    for (name, endpoint), (_, tests) in doc_rows().items():
        assert tests, f"the row for {name} ({endpoint}) names no test"
