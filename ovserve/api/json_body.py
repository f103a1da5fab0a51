"""Request bodies: JSON that is safe to hand to the rest of the server, or a 400.

Contract of :func:`parse_json_object`: the result is a dict whose containers nest at most
:data:`MAX_JSON_DEPTH` levels and whose strings (keys included) are valid Unicode, so nothing
downstream (pydantic, jinja2, the tokenizer binding, JSON encoding of a response that echoes a
field) can hit a ``RecursionError`` or a ``UnicodeEncodeError``. Each refusal names the field.

Both checks are paid only when the raw bytes say they could fail: a body with few brackets cannot
nest deeply, and a lone surrogate can only come from a ``\\uD800``-``\\uDFFF`` escape (raw UTF-8
cannot carry one; ``json.loads`` refuses it as invalid UTF-8).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ovserve.errors import BadRequestError
from ovserve.json_types import JsonObject

# Requests nest a JSON schema inside a tool inside a list: about 10 levels in practice.
MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotJSON(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    # Python's json module accepts NaN and Infinity, which JSON does not (and the engine's float
    # fields would take them).
    raise _NotJSON(f"{name} is not a JSON value")


def parse_json_object(body: bytes) -> JsonObject:
    try:
        payload = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise _too_deep(None) from None
    except ValueError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise BadRequestError("the request body must be a JSON object", code="invalid_json")
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
        _check_depth(payload)
    if _SURROGATE_ESCAPE.search(body):
        _check_unicode(payload)
    return payload


def _too_deep(param: str | None) -> BadRequestError:
    return BadRequestError(
        f"the request body nests JSON deeper than {MAX_JSON_DEPTH} levels", param=param, code="invalid_json"
    )


def _children(value: Any, path: str) -> list[tuple[str, Any]]:
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [(f"{path}.{key}" if path else str(key), child) for key, child in items]


def _check_depth(payload: JsonObject) -> None:
    # Iterative: the structure may be too deep for recursion, which is the point of the check.
    stack: list[tuple[str, Any, int]] = [("", payload, 1)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise _too_deep(path.split(".", 1)[0] or None)
        stack.extend(
            (child_path, child, depth + 1)
            for child_path, child in _children(value, path)
            if isinstance(child, dict | list)
        )


def _check_unicode(payload: JsonObject) -> None:
    stack: list[tuple[str, Any]] = [("", payload)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key in value:
                if _SURROGATE.search(key):
                    raise _not_unicode(path or None)
        for child_path, child in _children(value, path):
            if isinstance(child, str):
                if _SURROGATE.search(child):
                    raise _not_unicode(child_path)
            elif isinstance(child, dict | list):
                stack.append((child_path, child))


def _not_unicode(param: str | None) -> BadRequestError:
    where = f"'{param}'" if param else "a key of the request body"
    return BadRequestError(
        f"{where} is not valid Unicode: it contains a lone UTF-16 surrogate escape (\\uD800-\\uDFFF)",
        param=param,
        code="invalid_json",
    )
