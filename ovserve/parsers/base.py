"""Streaming extraction of tool calls and reasoning from model text.

A tool-call format is data (:class:`ToolCallFormat`: where calls start, where they end, how to
decode the payload); one state machine (:class:`ToolCallExtractor`) runs every format, so each
parser module only says what its model writes. Text arrives in arbitrary pieces (stream deltas);
the extractor holds back text that could be the start of a marker, never emits a marker as
content, and falls back to plain content when a payload does not decode.

A format that the marker machine cannot describe (gpt-oss's harmony channels carry reasoning,
content and calls in one syntax) gives a ``stream_parser`` instead: a factory of
:class:`OutputParser` objects that turn the whole output into :class:`Parsed` pieces.

Contract of every parser, unary or streamed: the text is fed in arbitrary pieces and the
concatenation of what comes out is the same whatever the pieces; a call is emitted whole, once
(its arguments a JSON object string); markers never reach ``content``; output that is not a valid
call of the format comes back as ``content`` (a malformed call is the model's text, not an error).

``special_tokens`` of a format: its markers that tokenizers declare special (``[TOOL_CALLS]``,
``<|channel|>``...). Decoding normally drops special tokens, so when a model's tokenizer has one of
them the request is decoded with special tokens kept and every *other* special token is removed
from the text before the parsers see it (``ovserve.core.chat``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import re
import secrets
import string
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Tool name -> its ``parameters`` JSON schema (``{}`` when the tool declared none), for formats
# whose argument values are text typed by the schema (Qwen3-Coder's XML, GLM's arg_value).
ToolSchemas = Mapping[str, Any]
NO_TOOLS: ToolSchemas = {}
# A JSON schema -> the regex of its compact JSON (``ovserve.core.guided.schema_regex``).
SchemaRegex = Callable[[Any], str]
# (tool name, parameters schema, schema_regex) -> the regex of one whole call in a format,
# markers included: what a grammar forces for ``tool_choice`` required / named.
CallRegex = Callable[[str, Any, SchemaRegex], str]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI's function.arguments
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")


class PayloadError(ValueError):
    """The text between the markers is not a tool call of this format."""


def call_from_object(item: Any, *, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON string) -> ToolCall."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise PayloadError("a tool call needs a 'name'")
    arguments: Any = {}
    for key in arguments_keys:
        if key in item:
            arguments = item[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise PayloadError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise PayloadError("arguments must be a JSON object")
    return ToolCall(name=item["name"], arguments=json.dumps(arguments, ensure_ascii=False))


def decode_json(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise PayloadError(f"not JSON: {exc}") from exc


def nine_alphanumerics() -> str:
    """A tool-call id as Mistral's chat templates demand it (and vLLM and OVMS generate it)."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


def regex_literal(text: str) -> str:
    """``text`` as a regex matching itself; a newline is written ``\\n`` (the engine's regex dialect)."""
    return re.escape(text).replace("\\\n", "\\n")


def json_object_call(begin: str, end: str, *, arguments_key: str = "arguments") -> CallRegex:
    """The :data:`CallRegex` of formats that write one call as ``begin{"name": ..., "arguments": {...}}end``."""

    def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
        schema = {
            "type": "object",
            "properties": {"name": {"const": name}, arguments_key: parameters},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        return f"{regex_literal(begin)}({schema_regex(schema)}){regex_literal(end)}"

    return call_regex


# -- arguments written as text (XML-style formats: Qwen3-Coder, GLM, MiniCPM5) -------------------

_NOT_DECODED = object()
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int in Python
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "unknown")


def _schema_types(schema: Any) -> set[str] | None:
    """The JSON types a property schema admits; None when it does not say (no ``type``,
    ``enum``, ``const``, or an ``anyOf``/``oneOf`` of typed alternatives)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind and all(isinstance(name, str) for name in kind):
        return set(kind)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return {_json_type(value) for value in schema["enum"]}
    if "const" in schema:
        return {_json_type(schema["const"])}
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            union: set[str] = set()
            for option in options:
                types = _schema_types(option)
                if types is None:
                    return None
                union |= types
            return union
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN/Infinity: json.loads accepts them, clients would not


def _decode_literal(text: str) -> Any:
    """``text`` as JSON, else as a Python literal (``True``, ``None``, ``{'k': 'v'}``: what
    templates that render values with ``| string`` teach); ``_NOT_DECODED`` when neither."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        pass
    try:
        value = ast.literal_eval(text)
        json.dumps(value, allow_nan=False)  # sets, bytes, complex, nan: not a JSON value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_DECODED
    return value


def property_schema(tools: ToolSchemas, tool: str, argument: str) -> Any:
    """The schema of ``argument`` in ``tool``'s parameters; None when the tool was not offered or
    does not declare the property."""
    parameters = tools.get(tool)
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return None
    return properties.get(argument)


def typed_value(text: str, schema: Any) -> Any:
    """An argument value the model wrote as text -> its JSON value, typed by the property's schema.

    A string property keeps the text as it is (a nullable one reads ``null``/``None`` as null; one
    that also admits other types takes the text's JSON value when it is one of them). Any other
    typed property is JSON-decoded, else read as a Python literal (``True``/``False``/``None``,
    single-quoted containers), else kept as the text. A property of unknown type (no schema, an
    undeclared argument, an unknown tool) is its JSON value when the text is JSON, else the text.
    Callers strip the format's own delimiters (Qwen3-Coder's newline around the value) first.
    """
    types = _schema_types(schema)
    if types is None:
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return text
    if "string" in types:
        if "null" in types and text.strip().lower() in ("null", "none"):
            return None
        others = types - {"string", "null"}
        if others:
            value = _decode_literal(text.strip())
            kind = _json_type(value)
            if kind in others or (kind == "integer" and "number" in others):
                return value
        return text
    if "boolean" in types and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    value = _decode_literal(text.strip())
    return text if value is _NOT_DECODED else value


def text_value_regex(schema: Any, schema_regex: SchemaRegex) -> str:
    """The regex of an argument value written as text, for the :data:`CallRegex` of XML-style
    formats; :func:`typed_value` reads what it admits back as the same value.

    A property that is only a string is raw text without ``<`` (the markup's delimiter: a forced
    string value cannot contain ``<``): its ``enum``/``const`` the literal texts, its ``pattern``
    or ``format`` the unquoted string regex, its length bounds a bounded repeat. A nullable or
    mixed string property is any such text. Every other property is its compact JSON
    (``schema_regex``, which also refuses keywords the grammar cannot enforce).
    """
    json_regex = schema_regex(schema)
    types = _schema_types(schema)
    if not types or "string" not in types:
        return json_regex
    if types != {"string"}:
        return "[^<]*"
    literals = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        literals = [schema["const"]]
    if literals is not None:
        return "(" + "|".join(regex_literal(value) for value in literals) + ")"
    if "pattern" in schema or "format" in schema:
        # outlines-core writes these as '"regex"' or '("regex")': the quotes are JSON's, not the text's.
        inner = json_regex[2:-2] if json_regex.startswith('("') and json_regex.endswith('")') else json_regex[1:-1]
        return f"({inner})"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) or isinstance(high, int):
        return f"[^<]{{{low if isinstance(low, int) else 0},{high if isinstance(high, int) else ''}}}"
    return "[^<]*"


def schema_arguments(parameters: Any) -> list[tuple[str, Any, bool]]:
    """(name, schema, required) of each declared property of a tool's parameters schema, in the
    schema's order, for call regexes that write arguments one by one. The schema's ``$defs`` /
    ``definitions`` go along with each property so its ``$ref`` still resolve."""
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties"), dict):
        return []
    required: list[Any] = parameters["required"] if isinstance(parameters.get("required"), list) else []
    shared = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    arguments = []
    for name, schema in parameters["properties"].items():
        if shared and isinstance(schema, dict):
            schema = {**shared, **schema}
        arguments.append((name, schema, name in required))
    return arguments


@dataclass
class Parsed:
    """What a piece of model output turned into: reasoning, answer text, whole tool calls."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def extend(self, other: Parsed) -> Parsed:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls += other.tool_calls
        return self


class OutputParser(Protocol):
    """A whole-output parser (reasoning, content and calls at once); see the module docstring."""

    def push(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed: ...


@dataclass(frozen=True)
class ParserContext:
    """What a stream parser is built with. ``tools``: None when tool calls are not parsed for
    this request (no tools offered); ``starts_in_reasoning``: the prompt opened the reasoning."""

    tools: ToolSchemas | None = None
    starts_in_reasoning: bool = False


@dataclass(frozen=True)
class ToolCallFormat:
    """How one model family writes tool calls.

    ``starts``: markers that open a call block. ``end``: the marker that closes it, or None when
    the block runs to the end of the output. ``start_of_output_only``: markers that only count
    as the very first non-space text (Llama 3 writes bare JSON). ``decode`` turns a block's
    payload into calls (given the offered tools' schemas) and raises :class:`PayloadError` when
    it is not a call.
    """

    name: str
    starts: tuple[str, ...]
    end: str | None
    decode: Callable[[str, ToolSchemas], list[ToolCall]]
    start_of_output_only: tuple[str, ...] = ()
    # Keep the start marker in the payload (Llama 3's "{" is part of the JSON).
    marker_in_payload: tuple[str, ...] = ()
    # The text before and after one ``{"name", "arguments"}`` call, for formats whose calls a
    # grammar can guide once the model opens a call (enable_tool_guided_generation).
    json_call_wrap: tuple[str, str] | None = None
    # One whole call as a regex, for formats whose calls a grammar can force (tool_choice
    # required / named); None: it cannot.
    call_regex: CallRegex | None = None
    # Markers of this format that tokenizers may declare special tokens (module docstring).
    special_tokens: tuple[str, ...] = ()
    # Formats the marker machine cannot describe: a whole-output parser (module docstring).
    stream_parser: Callable[[ParserContext], OutputParser] | None = None
    # The ids this family's chat template accepts back in the next turn, when it is picky
    # (Mistral's templates refuse any tool-call id that is not 9 alphanumerics); None: call_<hex>.
    call_id: Callable[[], str] | None = None
    # (start, end) pairs for start markers whose block does not close with ``end`` (None: it runs
    # to the end of the output): a format with several spellings of its block (Kimi's singular
    # and plural sections, LFM2's tagged list next to a bare pythonic list).
    block_ends: tuple[tuple[str, str | None], ...] = ()

    def end_of(self, start: str) -> str | None:
        """The marker that closes a block opened by ``start``."""
        for marker, end in self.block_ends:
            if marker == start:
                return end
        return self.end

    # Formats whose argument values are free text (XML-style): given the payload before an ``end``,
    # whether it stops inside a value. Then that ``end`` is the value's text (code that mentions
    # ``</tool_call>``) and the block reads on to the next one.
    open_payload: Callable[[str], bool] | None = None


@dataclass
class Extracted:
    """What a piece of model text turned into."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class ToolCallExtractor:
    def __init__(self, fmt: ToolCallFormat, tools: ToolSchemas = NO_TOOLS) -> None:
        self._fmt = fmt
        self._tools = tools
        self._pending = ""  # content that may be the beginning of a start marker
        self._block: str | None = None  # inside a call block: its text so far (marker included)
        self._marker = ""
        self._end: str | None = None  # what closes the open block (fmt.end_of its marker)
        self._seen_text = False  # start_of_output_only markers are over once text was emitted
        # Trailing whitespace waits for the text after it: before, between or after tool calls it
        # is the model's layout, not an answer, so it is content only when text follows or when the
        # output has no call at all (whole or in deltas, the same content either way).
        self._whitespace = ""
        self._called = False

    def push(self, text: str) -> Extracted:
        out = Extracted()
        self._pending += text
        while self._pending:
            if self._block is not None:
                if not self._consume_block(out):
                    break
                continue
            if not self._consume_content(out):
                break
        return out

    def finish(self) -> Extracted:
        """End of output: close an open block (or give it back as content)."""
        out = Extracted()
        if self._block is not None:
            block, self._block = self._block + self._pending, None
            self._pending = ""
            if self._end is None:
                self._decode_into(block, out)
            else:
                self._emit_content(out, block)  # unterminated: not a call after all
        self._emit_content(out, self._pending)
        self._pending = ""
        if not self._called:
            out.content += self._whitespace
        self._whitespace = ""
        return out

    # -- states ---------------------------------------------------------------------------------

    def _markers(self) -> tuple[str, ...]:
        if self._seen_text:
            return self._fmt.starts
        return self._fmt.starts + self._fmt.start_of_output_only

    def _consume_content(self, out: Extracted) -> bool:
        text = self._pending
        best: tuple[int, str] | None = None
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                stripped = text.lstrip()
                position = len(text) - len(stripped) if stripped.startswith(marker) else -1
            else:
                position = text.find(marker)
            if position != -1 and (best is None or position < best[0]):
                best = (position, marker)
        if best is not None:
            position, marker = best
            self._emit_content(out, text[:position])
            self._block, self._marker, self._end = marker, marker, self._fmt.end_of(marker)
            self._pending = text[position + len(marker) :]
            return True
        # No marker yet: keep back whatever could still become one.
        keep = self._holdback(text)
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _holdback(self, text: str) -> int:
        keep = 0
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                if not text.strip() or marker.startswith(text.lstrip()):
                    keep = max(keep, len(text))
                continue
            for size in range(min(len(marker) - 1, len(text)), 0, -1):
                if marker.startswith(text[-size:]):
                    keep = max(keep, size)
                    break
        return keep

    def _emit_content(self, out: Extracted, text: str) -> None:
        body = text.rstrip()
        if not body:
            self._whitespace += text
            return
        out.content += self._whitespace + body
        self._whitespace = text[len(body) :]
        self._seen_text = True

    def _consume_block(self, out: Extracted) -> bool:
        assert self._block is not None
        end = self._end
        if end is None:
            self._block += self._pending
            self._pending = ""
            return False
        position = self._pending.find(end)
        if position == -1:
            return False  # wait for the end marker (finish() handles a block that never closes)
        block = self._block + self._pending[: position + len(end)]
        if self._fmt.open_payload is not None and self._fmt.open_payload(block[len(self._marker) : -len(end)]):
            self._block, self._pending = block, self._pending[position + len(end) :]
            return True
        self._pending = self._pending[position + len(end) :]
        self._block = None
        self._decode_into(block, out)
        return True

    def _decode_into(self, block: str, out: Extracted) -> None:
        payload = block[len(self._marker) :]
        if self._end is not None and payload.endswith(self._end):
            payload = payload[: -len(self._end)]
        if self._marker in self._fmt.marker_in_payload:
            payload = self._marker + payload
        try:
            calls = self._fmt.decode(payload.strip(), self._tools)
        except PayloadError as exc:
            # Malformed: the client sees what the model wrote; the log says why it is no call.
            log.warning("%s tool call not parsed, returned as content: %s", self._fmt.name, exc)
            self._emit_content(out, block)
            return
        if self._fmt.call_id is not None:
            calls = [dataclasses.replace(call, id=self._fmt.call_id()) for call in calls]
        out.tool_calls.extend(calls)
        self._seen_text = self._called = True


@dataclass(frozen=True)
class ReasoningFormat:
    """``start``...``end`` around the reasoning at the beginning of the output. ``stream_parser``:
    formats that need more (harmony channels) parse the whole output themselves."""

    name: str
    start: str
    end: str
    special_tokens: tuple[str, ...] = ()  # as ToolCallFormat.special_tokens
    stream_parser: Callable[[ParserContext], OutputParser] | None = None


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


class ReasoningSplitter:
    """Separates ``<think>...</think>`` from the answer; reasoning never leaks into content.

    ``in_reasoning``: the prompt already opened the block (templates that end with ``<think>``),
    so the output starts inside it.
    """

    def __init__(self, fmt: ReasoningFormat, *, in_reasoning: bool = False) -> None:
        self._fmt = fmt
        self._state = "reasoning" if in_reasoning else "start"
        self._pending = ""

    def push(self, text: str) -> Split:
        out = Split()
        self._pending += text
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                if stripped.startswith(self._fmt.start):
                    self._pending = stripped[len(self._fmt.start) :]
                    self._state = "reasoning"
                elif self._fmt.start.startswith(stripped):
                    return out  # maybe the start tag, still arriving
                else:
                    self._state = "content"
            elif self._state == "reasoning":
                position = self._pending.find(self._fmt.end)
                if position != -1:
                    out.reasoning += self._pending[:position]
                    self._pending = self._pending[position + len(self._fmt.end) :]
                    self._state = "after_reasoning"
                    continue
                keep = _suffix_prefix(self._pending, self._fmt.end)
                out.reasoning += self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                return out
            elif self._state == "after_reasoning":
                # Templates put blank lines between </think> and the answer; they belong to neither.
                self._pending = self._pending.lstrip("\n")
                if self._pending:
                    self._state = "content"
            else:
                out.content += self._pending
                self._pending = ""
        return out

    def finish(self) -> Split:
        out = Split()
        if self._state == "reasoning":
            out.reasoning = self._pending  # the model never closed its thinking
        else:
            out.content = self._pending
        self._pending = ""
        return out


def inside_json_string(text: str) -> bool:
    """An ``open_payload`` for JSON payloads: whether ``text`` ends inside a JSON string (an odd
    count of unescaped quotes), where the block's end marker is argument text."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = inside
        elif char == '"':
            inside = not inside
    return inside


def _suffix_prefix(text: str, marker: str) -> int:
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
