"""A batch's input file, checked line by line before any line runs, and its output lines.

:func:`check_input` reads the whole file once (streamed, never held whole) and reports every
problem with its line number (1-based, as OpenAI's ``errors.data[].line``): a line that is not
JSON, not an object or not of the input format (``custom_id``, ``method`` POST, ``url``, ``body``
an object), a ``custom_id`` seen before, a ``url`` other than the batch's endpoint, a ``model``
missing or different from the first line's, a body that asks for a stream. One problem fails the
batch (status ``failed``) before any request runs; at most :data:`MAX_ERRORS` are reported.

:func:`read_input` yields the lines of a checked file; :func:`output_line` and :func:`error_line`
write OpenAI's output format: ``{"id", "custom_id", "response": {"status_code", "request_id",
"body"}, "error"}``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ovserve.dialects.openai.batches.objects import BatchError, InputLine
from ovserve.errors import first_complaint
from ovserve.json_types import JsonObject

MAX_ERRORS = 100


@dataclass
class Checked:
    """What :func:`check_input` found: the number of requests, their model, the problems."""

    total: int = 0
    model: str | None = None
    errors: list[BatchError] = field(default_factory=list)
    more_errors: int = 0  # problems past MAX_ERRORS, counted only

    def add(self, line: int, code: str, message: str, param: str | None = None) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(BatchError(code=code, message=message, param=param, line=line))
        else:
            self.more_errors += 1


def _parse(text: bytes) -> InputLine | tuple[str, str, str | None]:
    """The line, or (code, message, param) of what is wrong with it."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return "invalid_json_line", "This line is not parseable as valid JSON.", None
    if not isinstance(value, dict):
        return "invalid_request", "A line must be a JSON object.", None
    try:
        return InputLine.model_validate(value)
    except ValidationError as exc:
        complaint = first_complaint(exc)
        return "invalid_request", complaint.text, complaint.param


def check_input(path: Path, endpoint: str) -> Checked:
    """Every line of ``path`` checked for a batch on ``endpoint`` (see the module doc). Blocking:
    run it on a worker thread."""
    checked = Checked()
    seen: set[str] = set()
    with path.open("rb") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue  # a blank line (a trailing newline twice) is not a request
            checked.total += 1
            parsed = _parse(text)
            if isinstance(parsed, tuple):
                checked.add(number, *parsed)
                continue
            if parsed.custom_id in seen:
                message = f"The custom_id '{parsed.custom_id}' is used more than once in this batch."
                checked.add(number, "duplicate_custom_id", message, "custom_id")
                continue
            seen.add(parsed.custom_id)
            if parsed.url != endpoint:
                message = f"The url '{parsed.url}' does not match the batch's endpoint '{endpoint}'."
                checked.add(number, "mismatched_endpoint", message, "url")
                continue
            model = parsed.body.get("model")
            if not isinstance(model, str) or not model:
                checked.add(number, "missing_required_parameter", "The body has no 'model'.", "body.model")
            elif checked.model is None:
                checked.model = model
            elif model != checked.model:
                message = f"The model '{model}' differs from this batch's '{checked.model}'."
                checked.add(number, "mismatched_model", message, "body.model")
            if parsed.body.get("stream") is True:
                checked.add(number, "invalid_request", "A batch request cannot stream.", "body.stream")
    if checked.total == 0:
        checked.add(1, "empty_file", "The input file has no requests.")
    return checked


def read_input(path: Path) -> Iterator[InputLine]:
    """The requests of a file :func:`check_input` passed, in order."""
    with path.open("rb") as lines:
        for text in lines:
            if text.strip():
                yield InputLine.model_validate_json(text)


def _record(custom_id: str, response: JsonObject | None, error: JsonObject | None) -> str:
    record = {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": response, "error": error}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def output_line(custom_id: str, status_code: int, body: JsonObject) -> str:
    """A request that was answered (2xx to the output file, 4xx/5xx to the error file): OpenAI's
    ``response`` with the status, a request id and the body; ``error`` null."""
    return _record(custom_id, {"status_code": status_code, "request_id": uuid.uuid4().hex, "body": body}, None)


def error_line(custom_id: str, code: str, message: str) -> str:
    """A request that got no answer (its batch expired or was cancelled before it ran): ``response``
    null, ``error`` OpenAI's ``{code, message}``."""
    return _record(custom_id, None, {"code": code, "message": message})


def recorded_ids(path: Path, *, cut: bool = True) -> set[str]:
    """The ``custom_id`` of every complete line of an output or error file being written; a last
    line a crash cut short is removed (its request runs again), or only skipped if not ``cut``."""
    if not path.exists():
        return set()
    ids: set[str] = set()
    keep = 0
    with path.open("rb") as lines:
        for text in lines:
            if not text.endswith(b"\n"):
                break
            try:
                ids.add(json.loads(text)["custom_id"])
            except (ValueError, KeyError, TypeError):
                break
            keep += len(text)
    if cut and keep != path.stat().st_size:
        with path.open("r+b") as partial:
            partial.truncate(keep)
    return ids
