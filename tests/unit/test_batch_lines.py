"""A batch's input is checked line by line before anything runs, each problem with its line number;
the output lines are OpenAI's format; a crash's cut-off last line is dropped on resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ovserve.dialects.openai.batches.lines import (
    MAX_ERRORS,
    check_input,
    error_line,
    output_line,
    read_input,
    recorded_ids,
)

CHAT = "/v1/chat/completions"


def request(custom_id: str, model: str = "m", url: str = CHAT, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": model, **body}}


def write(tmp_path: Path, *lines: dict[str, Any] | str) -> Path:
    path = tmp_path / "input.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_a_good_file_passes_with_its_count_and_model(tmp_path: Path) -> None:
    path = write(tmp_path, request("a"), request("b"), "", request("c"))
    checked = check_input(path, CHAT)
    assert (checked.total, checked.model, checked.errors) == (3, "m", [])
    assert [line.custom_id for line in read_input(path)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("bad", "code", "param"),
    [
        ('{"custom_id": "x", "method": "POST"', "invalid_json_line", None),
        ("[1, 2]", "invalid_request", None),
        (json.dumps({"custom_id": "x", "method": "POST", "url": CHAT}), "invalid_request", "body"),
        (json.dumps({**request("x"), "method": "GET"}), "invalid_request", "method"),
        (json.dumps({**request("x"), "body": [1]}), "invalid_request", "body"),
        (json.dumps({**request("x"), "custom_id": ""}), "invalid_request", "custom_id"),
        (json.dumps(request("a")), "duplicate_custom_id", "custom_id"),
        (json.dumps(request("x", url="/v1/embeddings")), "mismatched_endpoint", "url"),
        (json.dumps(request("x", model="other")), "mismatched_model", "body.model"),
        (json.dumps({**request("x"), "body": {"messages": []}}), "missing_required_parameter", "body.model"),
        (json.dumps(request("x", stream=True)), "invalid_request", "body.stream"),
    ],
)
def test_each_problem_is_reported_with_its_line_number(tmp_path: Path, bad: str, code: str, param: str | None) -> None:
    path = write(tmp_path, request("a"), bad, request("b"))
    checked = check_input(path, CHAT)
    assert [(error.line, error.code, error.param) for error in checked.errors] == [(2, code, param)]


def test_an_empty_file_fails_and_errors_are_capped(tmp_path: Path) -> None:
    assert [error.code for error in check_input(write(tmp_path), CHAT).errors] == ["empty_file"]
    many = write(tmp_path, *["not json"] * (MAX_ERRORS + 5))
    checked = check_input(many, CHAT)
    assert (len(checked.errors), checked.more_errors) == (MAX_ERRORS, 5)


def test_output_lines_have_openais_shape() -> None:
    answered = json.loads(output_line("a", 200, {"id": "chatcmpl-1"}))
    assert answered["custom_id"] == "a" and answered["error"] is None and answered["id"].startswith("batch_req_")
    assert answered["response"]["status_code"] == 200 and answered["response"]["body"] == {"id": "chatcmpl-1"}
    assert isinstance(answered["response"]["request_id"], str)
    expired = json.loads(error_line("b", "batch_expired", "too late"))
    assert expired["response"] is None and expired["error"] == {"code": "batch_expired", "message": "too late"}


def test_a_line_cut_short_by_a_crash_is_dropped_and_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    path.write_text(output_line("a", 200, {}) + output_line("b", 200, {}) + '{"id": "batch_req_x", "custom_i')
    assert recorded_ids(path) == {"a", "b"}
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 2
    assert recorded_ids(tmp_path / "missing.jsonl") == set()
