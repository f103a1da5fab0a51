"""Every dialect's streamed text step, encoded without its models (``ovserve.dialects.body.Template``),
is byte for byte what its response models encode: any text, any choice or block index, any event
number, any model name; and an envelope that happens to hold a hole's marker is left to the models."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ovserve.dialects.body import NUMBER_HOLE, Template, json_string, text_hole
from ovserve.dialects.openai.completions import adapter as completions
from ovserve.dialects.openai.completions.response import CompletionChoice

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
