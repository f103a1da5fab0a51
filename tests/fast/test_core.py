"""The generation core against a scripted engine, with no dialect and no HTTP: a Conversation in,
typed steps and usage out, and every refusal naming the origin the adapter gave it."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from ovserve.core.chat import ChatGeneration
from ovserve.core.conversation import Conversation, Image, JsonSchemaFormat, Message, Sampling, Text, Tool
from ovserve.core.job import Delta
from ovserve.core.media import MediaResolver
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry
from ovserve.settings.media import MediaSettings
from tests.fast.harness import FastModel, fast_model
from tests.fast.scripted_engine import reply

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>'


async def started(fast: FastModel) -> ChatGeneration:
    await fast.model.engine.keep_started()
    return ChatGeneration(ModelRegistry([fast.model]), MediaResolver(MediaSettings()))


def conversation(*messages: Message, **fields: Any) -> Conversation:
    return Conversation(
        model="fast-model",
        messages=list(messages) or [Message("user", "chat.0", [Text("Hi", "chat.0")])],
        sampling=fields.pop("sampling", Sampling()),
        prompt_origin="chat",
        **fields,
    )


async def steps_of(generation: ChatGeneration, request: Conversation) -> tuple[list[Delta], Any]:
    job = await generation.prepare(request)
    async with contextlib.aclosing(job.steps()) as steps:
        return [delta async for delta in steps], job


async def test_a_conversation_becomes_typed_steps_and_usage() -> None:
    fast = fast_model(reply("Hel", "lo"))
    generation = await started(fast)
    deltas, job = await steps_of(generation, conversation())
    assert [(delta.content, delta.first, delta.finish_reason) for delta in deltas] == [
        ("Hel", True, None),
        ("lo", False, "stop"),
    ]
    prompt = fast.model.render_chat([{"role": "user", "content": "Hi"}], None, None)
    assert (job.usage.prompt_tokens, job.usage.completion_tokens) == (len(prompt), 2)
    fast.model.tokenizer.close()


async def test_offered_tools_are_parsed_into_tool_call_steps() -> None:
    fast = fast_model(reply("Let me check.", CALL))
    generation = await started(fast)
    tool = Tool("lookup", "tools.0", parameters={"type": "object"}, parameters_origin="tools.0.parameters")
    deltas, _ = await steps_of(generation, conversation(tools=[tool]))
    calls = [call for delta in deltas for call in delta.tool_calls]
    assert [(call.name, call.arguments) for call in calls] == [("lookup", {"q": "x"})]
    assert deltas[-1].finish_reason == "tool_calls"
    assert "".join(delta.content for delta in deltas) == "Let me check."
    fast.model.tokenizer.close()


async def test_an_image_for_a_text_only_model_names_the_content_it_came_in() -> None:
    fast = fast_model()
    generation = await started(fast)
    message = Message("user", "input.3.content", [Image("data:image/png;base64,AAAA", "input.3.content.0")])
    with pytest.raises(UnsupportedParameterError) as caught:
        await generation.prepare(conversation(message))
    assert caught.value.param == "input.3.content"
    assert fast.launcher.engine.adds() == []
    fast.model.tokenizer.close()


async def test_an_uncompilable_schema_names_the_schema_the_adapter_pointed_at() -> None:
    fast = fast_model()
    generation = await started(fast)
    schema = JsonSchemaFormat({"type": "nonsense"}, "format", "format.schema")
    with pytest.raises(BadRequestError) as caught:
        await generation.prepare(conversation(output_format=schema))
    assert caught.value.param == "format.schema"
    fast.model.tokenizer.close()


async def test_an_output_limit_beyond_the_context_names_the_field_the_client_used() -> None:
    fast = fast_model(context_length=64)
    generation = await started(fast)
    sampling = Sampling(max_tokens=1000, max_tokens_param="max_output_tokens")
    with pytest.raises(BadRequestError) as caught:
        await generation.prepare(conversation(sampling=sampling))
    assert caught.value.param == "max_output_tokens"
    assert "max_output_tokens asks for 1000" in caught.value.message
    fast.model.tokenizer.close()
