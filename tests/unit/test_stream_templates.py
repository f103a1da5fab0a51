"""Every dialect's streamed text step, encoded without its models (``ovserve.dialects.body.Template``),
is byte for byte what its response models encode: any text, any choice or block index, any event
number, any model name; and an envelope that happens to hold a hole's marker is left to the models."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from ovserve.core.job import Delta
from ovserve.dialects.anthropic import events as anthropic_events
from ovserve.dialects.body import NUMBER_HOLE, Template, json_string, text_hole
from ovserve.dialects.ollama import adapter as ollama_adapter
from ovserve.dialects.ollama import response as ollama_response
from ovserve.dialects.openai.completions import adapter as completions
from ovserve.dialects.openai.completions.response import CompletionChoice
from ovserve.dialects.openai.responses import events as responses_events

TEXTS = st.text(min_size=1)
NAMES = st.text(min_size=1, max_size=20)
AWKWARD = 'a"b\\c\n\t\x00\x1f\x7f é 漢字 🙂 \u2028 {} {0}'


def _job(include_usage: bool = False, model: str = "m") -> Any:
    return SimpleNamespace(
        id="cmpl-0123", created=1_700_000_000, model=SimpleNamespace(name=model), include_usage=include_usage
    )


# -- the template itself ------------------------------------------------------------------------


def test_a_template_refuses_a_marker_that_is_not_written_exactly_once() -> None:
    job = _job(model=text_hole(0))  # a model name that is a hole's marker
    choice = CompletionChoice(index=0, text=text_hole(0), logprobs=None, finish_reason=None)
    assert Template.of(completions._completion(job, [choice], None), text_hole(0)) is None
    assert completions.TextChunks.of(job) is None
    choice = CompletionChoice(index=0, text="no hole", logprobs=None, finish_reason=None)
    assert Template.of(completions._completion(_job(), [choice], None), text_hole(0)) is None


def test_braces_in_the_envelope_are_kept() -> None:
    job = _job(model="{model} {}")
    chunks = completions.TextChunks.of(job)
    assert chunks is not None
    expected = CompletionChoice(index=3, text=AWKWARD, logprobs=None, finish_reason=None)
    assert chunks.chunk(3, AWKWARD).encode() == completions._completion(job, [expected], None).encode()


@given(text=st.text())
def test_json_string_writes_text_as_the_models_do(text: str) -> None:
    assert (
        json_string(text)
        == CompletionChoice(index=0, text=text, logprobs=None, finish_reason=None).encode()[
            len('{"index":0,"text":') : -len(',"logprobs":null,"finish_reason":null}')
        ]
    )


def test_the_number_hole_is_an_int_no_stream_reaches() -> None:
    assert isinstance(NUMBER_HOLE, int) and NUMBER_HOLE > 2**53


# -- text completions ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, choice=st.integers(min_value=0, max_value=20), include_usage=st.booleans(), model=NAMES)
def test_a_completion_text_step_is_encoded_as_the_model_encodes_it(
    text: str, choice: int, include_usage: bool, model: str
) -> None:
    job = _job(include_usage, model)
    chunks = completions.TextChunks.of(job)
    if chunks is None:  # the model name holds a marker: the models encode every step
        return
    expected = CompletionChoice(index=choice, text=text, logprobs=None, finish_reason=None)
    assert chunks.chunk(choice, text).encode() == completions._completion(job, [expected], None).encode()


# -- Responses ----------------------------------------------------------------------------------


def _step(content: str = "", reasoning: str = "", **fields: Any) -> Delta:
    values: dict[str, Any] = {"tool_calls": [], "logprobs": None, "first": False, "finish_reason": None}
    values.update(fields)
    return Delta(choice=0, reasoning=reasoning, content=content, calls_before=0, **values)


STEPS = st.lists(
    st.tuples(st.sampled_from(["content", "reasoning", "both", "space"]), st.text(min_size=1, max_size=8)),
    min_size=1,
    max_size=12,
)


def _steps(spec: list[tuple[str, str]]) -> list[Delta]:
    made = []
    for kind, text in spec:
        if kind == "both":
            made.append(_step(content=text, reasoning=text))
        elif kind == "space":
            made.append(_step(content=" \n"))
        else:
            made.append(_step(**{kind: text}))
    return made


def _ids() -> Any:
    numbers = itertools.count()
    return lambda prefix: f"{prefix}_{next(numbers)}"


def _responses_stream(steps: list[Delta], fast: bool) -> tuple[list[tuple[str | None, str]], list[Any]]:
    """The encoded events (and their names) and the output items of ``steps``, with or without the fast path."""
    items: list[Any] = []
    builder = responses_events.OutputBuilder(items, itertools.count())
    encoded: list[tuple[str | None, str]] = []
    with patch.object(responses_events, "new_id", _ids()):
        for step in steps:
            fast_event = builder.text_event(step) if fast else None
            if fast_event is not None:
                encoded.append((fast_event.type, fast_event.encode()))
                continue
            encoded += [(event.type, event.encode()) for event in builder.push(step)]
        encoded += [(event.type, event.encode()) for event in builder.finish("completed")]
    return encoded, [item.encode() for item in items]


@settings(max_examples=200, deadline=None)
@given(spec=STEPS)
def test_a_responses_stream_is_the_models_stream(spec: list[tuple[str, str]]) -> None:
    steps = _steps(spec)
    assert _responses_stream(steps, fast=True) == _responses_stream(steps, fast=False)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, reasoning=st.booleans(), before=st.integers(min_value=0, max_value=50))
def test_a_responses_text_step_is_encoded_as_the_model_encodes_it(text: str, reasoning: bool, before: int) -> None:
    items: list[Any] = []
    builder = responses_events.OutputBuilder(items, itertools.count(before))
    opening = _step(reasoning="hm") if reasoning else _step(content="Hi")
    builder.push(opening)
    event = builder.text_event(_step(reasoning=text) if reasoning else _step(content=text))
    assert event is not None
    item = items[-1]
    expected = responses_events._delta_event(item, len(items) - 1, before + 3, text)
    assert (event.type, event.encode()) == (expected.type, expected.encode())
    # The open item's text is joined when the items are read.
    assert builder.output()[-1].content[0].text == opening.reasoning + opening.content + text


def test_responses_leave_every_other_step_to_the_models() -> None:
    builder = responses_events.OutputBuilder([], itertools.count())
    assert builder.text_event(_step(content="Hi")) is None  # no item open yet
    builder.push(_step(reasoning="hm"))
    assert builder.text_event(_step(content="Hi")) is None  # the message is not the open item
    assert builder.text_event(_step(reasoning="a", content="b")) is None
    call = SimpleNamespace(id="c", name="f")  # any call: the step is the models' whatever its shape
    assert builder.text_event(_step(reasoning="a", tool_calls=[call])) is None
    assert builder.text_event(_step(reasoning=AWKWARD)) is not None


# -- Anthropic ----------------------------------------------------------------------------------


def _messages_stream(steps: list[Delta], fast: bool) -> tuple[list[tuple[str | None, str]], list[str]]:
    """The encoded events (and their names) and the content blocks of ``steps``, with or without the fast path."""
    builder = anthropic_events.BlockBuilder()
    encoded: list[tuple[str | None, str]] = []
    for step in steps:
        fast_event = builder.text_event(step) if fast else None
        if fast_event is not None:
            encoded.append((fast_event.type, fast_event.encode()))
            continue
        encoded += [(event.type, event.encode()) for event in builder.push(step)]
    encoded += [(event.type, event.encode()) for event in builder.finish()]
    return encoded, [block.encode() for block in builder.blocks]


@settings(max_examples=200, deadline=None)
@given(spec=STEPS)
def test_a_messages_stream_is_the_models_stream(spec: list[tuple[str, str]]) -> None:
    steps = _steps(spec)
    assert _messages_stream(steps, fast=True) == _messages_stream(steps, fast=False)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, thinking=st.booleans(), blocks=st.integers(min_value=0, max_value=5))
def test_a_messages_text_step_is_encoded_as_the_model_encodes_it(text: str, thinking: bool, blocks: int) -> None:
    builder = anthropic_events.BlockBuilder()
    for n in range(blocks):  # blocks before the open one: its index
        list(builder.push(_step(content="x") if n % 2 else _step(reasoning="x")))
    opening = _step(reasoning="hm") if thinking else _step(content="Hi")
    list(builder.push(opening))
    event = builder.text_event(_step(reasoning=text) if thinking else _step(content=text))
    assert event is not None
    index = len(builder.blocks) - 1
    expected = anthropic_events._delta_event(index, "thinking" if thinking else "text", text)
    assert (event.type, event.encode()) == ("content_block_delta", expected.encode())


def test_messages_leave_every_other_step_to_the_models() -> None:
    builder = anthropic_events.BlockBuilder()
    assert builder.text_event(_step(content="Hi")) is None  # no block open yet
    list(builder.push(_step(reasoning="hm")))
    assert builder.text_event(_step(content="Hi")) is None  # a text block would open
    assert builder.text_event(_step(reasoning="a", content="b")) is None
    assert builder.text_event(_step(reasoning="a", tool_calls=[SimpleNamespace(id="c", name="f")])) is None
    assert builder.text_event(_step(reasoning=AWKWARD)) is not None


# -- Ollama -------------------------------------------------------------------------------------


def _ollama_call(chat: bool, model: str) -> Any:
    return SimpleNamespace(job=SimpleNamespace(model=SimpleNamespace(name=model)), chat=chat)


@settings(max_examples=300, deadline=None)
@given(
    text=TEXTS,
    thinking=st.booleans(),
    chat=st.booleans(),
    model=NAMES,
    at=st.datetimes(timezones=st.just(UTC)),
)
def test_an_ollama_text_line_is_encoded_as_the_models_encode_it(
    text: str, thinking: bool, chat: bool, model: str, at: datetime
) -> None:
    call = _ollama_call(chat, model)
    step = _step(reasoning=text) if thinking else _step(content=text)
    stamp = ollama_response.timestamp(at)  # any moment: with and without microseconds
    with patch.object(ollama_adapter, "timestamp", lambda: stamp):
        lines = ollama_adapter.TextLines.of(call)
        if lines is None:  # the model name holds a marker: the models encode every line
            return
        encoded = lines.of_step(step)
        assert encoded is not None
        assert encoded.encode() == ollama_adapter._line(call, step).encode()


@settings(max_examples=300, deadline=None)
@given(moments=st.lists(st.datetimes(min_value=datetime(1970, 1, 2), timezones=st.just(UTC)), min_size=1, max_size=4))
def test_ollamas_timestamp_of_now_is_datetimes(moments: list[datetime]) -> None:
    """Now's timestamp (each streamed line's) formats its second once per second: it is still what
    datetime writes for that moment, with and without microseconds, across seconds."""
    for moment in moments:
        microseconds = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        nanoseconds = microseconds * 1000 + 999  # time_ns() a little past the microsecond
        with patch.object(ollama_response.time, "time_ns", lambda now=nanoseconds: now):
            assert ollama_response.timestamp() == ollama_response.timestamp(moment)


def test_ollama_leaves_every_other_step_to_the_models() -> None:
    lines = ollama_adapter.TextLines.of(_ollama_call(True, "m"))
    assert lines is not None
    assert lines.of_step(_step(content="a", reasoning="b")) is None  # one line with both
    assert lines.of_step(_step(content="a", tool_calls=[SimpleNamespace(id="c", name="f")])) is None
    assert lines.of_step(_step()) is None
    assert ollama_adapter.TextLines.of(_ollama_call(False, text_hole(1))) is None


def test_ollama_lines_keep_ollamas_key_order() -> None:
    keys = list(ollama_response.ChatResponse.model_fields)
    assert keys[:4] == ["model", "created_at", "message", "done"] and keys[4] == "done_reason"
    assert set(ollama_response.Stats.model_fields) <= set(ollama_response.GenerateResponse.model_fields)
