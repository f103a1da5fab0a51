"""The chat stream's text chunks, encoded without their models (``TextChunks``), are byte for byte
what ``ChatCompletionChunk`` encodes: any text, either field, any choice index, with and without
``usage: null`` (include_usage); and every other step still goes through the models."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ovserve.core.job import Delta
from ovserve.dialects.openai.chat import response as body
from ovserve.dialects.openai.chat.adapter import TextChunks
from ovserve.parsers.calls import ToolCall


def _job(include_usage: bool, model: str = "m") -> Any:
    return SimpleNamespace(
        id="chatcmpl-0123", created=1_700_000_000, model=SimpleNamespace(name=model), include_usage=include_usage
    )


def _delta(choice: int = 0, content: str = "", reasoning: str = "", **fields: Any) -> Delta:
    values: dict[str, Any] = {"tool_calls": [], "logprobs": None, "first": False, "finish_reason": None}
    values.update(fields)
    return Delta(choice=choice, reasoning=reasoning, content=content, calls_before=0, **values)


def _model_encoding(job: Any, choice: int, field: str, text: str) -> str:
    chunk = body.ChatCompletionChunk(
        id=job.id,
        object="chat.completion.chunk",
        created=job.created,
        model=job.model.name,
        choices=[body.ChunkChoice(index=choice, delta=body.Delta(**{field: text}), logprobs=None, finish_reason=None)],
    )
    if job.include_usage:
        chunk.usage = None
    return chunk.encode()


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(min_size=1),
    choice=st.integers(min_value=0, max_value=20),
    reasoning=st.booleans(),
    include_usage=st.booleans(),
    model=st.text(min_size=1, max_size=20),
)
def test_a_text_step_is_encoded_as_the_model_encodes_it(
    text: str, choice: int, reasoning: bool, include_usage: bool, model: str
) -> None:
    job = _job(include_usage, model)
    delta = _delta(choice, reasoning=text) if reasoning else _delta(choice, content=text)
    encoded = TextChunks(job).of(delta)
    assert encoded is not None
    field = "reasoning_content" if reasoning else "content"
    assert encoded.encode() == _model_encoding(job, choice, field, text)


def test_control_characters_quotes_and_non_ascii_text() -> None:
    job = _job(include_usage=True)
    text = 'a"b\\c\n\t\x00\x1f\x7f é 漢字 🙂 \u2028'
    encoded = TextChunks(job).of(_delta(content=text))
    assert encoded is not None and encoded.encode() == _model_encoding(job, 0, "content", text)


def test_every_other_step_is_left_to_the_models() -> None:
    chunks = TextChunks(_job(include_usage=False))
    call = ToolCall(id="c", name="f", arguments={})
    for delta in (
        _delta(content="hi", first=True),  # the role chunk comes first
        _delta(content="hi", finish_reason="stop"),
        _delta(content="hi", reasoning="hm"),  # two pieces: two chunks
        _delta(tool_calls=[call]),
        _delta(),  # nothing said
    ):
        assert chunks.of(delta) is None, delta
