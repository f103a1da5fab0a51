"""ovserve renders templates with jinja2; the result must match the tokenizer's own rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from ovserve.errors import BadRequestError
from ovserve.models.chat_template import ChatTemplate
from ovserve.models.served import ServedModel
from ovserve.settings.schema import ModelSettings, ServerSettings

CONVERSATIONS = [
    [{"role": "user", "content": "hello"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"},
        {"role": "user", "content": "More?"},
    ],
    [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_jinja_rendering_matches_openvino_tokenizer(tiny_llm: Path, messages: list[dict]) -> None:
    import openvino_genai as ov_genai

    settings = ModelSettings(name="m", path=tiny_llm)
    model = ServedModel.load(settings, ServerSettings(models=[settings]))
    expected = ov_genai.Tokenizer(str(tiny_llm)).apply_chat_template(messages, add_generation_prompt=True)
    assert model.render_chat(messages, None, None) == expected


def test_template_exception_becomes_a_400() -> None:
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(BadRequestError, match="roles must alternate"):
        template.render([{"role": "user", "content": "x"}])


def test_sandbox_blocks_attribute_escape() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(BadRequestError):
        template.render([])
