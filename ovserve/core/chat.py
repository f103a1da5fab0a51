"""Chat generation: a :class:`~ovserve.core.conversation.Conversation` -> a :class:`ChatJob`.

:meth:`ChatGeneration.prepare` does everything that can fail with a 4xx or 503 (model lookup,
images against the media policy, template, tokenization, context length, generation config,
grammar) before any engine work, so a stream only starts for a request the engine will run.
Every error names the client's own field through the conversation's origins.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ovserve.core.conversation import Conversation, Image, Message, Text, Tool, template_message
from ovserve.core.guided import (
    GrammarSpec,
    forced_tool_call_grammar,
    guided_tool_calls_grammar,
    response_format_grammar,
)
from ovserve.core.job import Job, ready_model, sampling_params
from ovserve.core.media import ImageRequest, MediaResolver
from ovserve.core.output import ChoiceOutput
from ovserve.engine.messages import EnginePrompt, VisionPrompt
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.models.chat_template import TemplateMessage
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.models.vision import image_tag
from ovserve.parsers import format_markers


@dataclass(kw_only=True)
class ChatJob(Job):
    id_prefix = "chatcmpl"

    prompt_ids: list[int]  # for a VLM: the ids of the prompt with image tokens expanded (counting only)
    vision_prompt: VisionPrompt | None = None  # what a VLM's engine gets instead of prompt_ids
    starts_in_reasoning: bool = False  # the template opened the reasoning block in the prompt
    # The tools the template saw (none for tool_choice none, only the named one if named).
    tools: list[Tool] = field(default_factory=list)
    raw_output: bool = False  # skip_special_tokens false: the text as generated, parsers off (OVMS)
    single_call: bool = False  # parallel_tool_calls false: at most one tool call
    # Special-token texts removed before parsing (decoded with special tokens kept for the parsers).
    strip_tokens: frozenset[str] = frozenset()

    def engine_prompts(self) -> list[EnginePrompt]:
        return [self.vision_prompt or self.prompt_ids]

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    def choice_output(self) -> ChoiceOutput:
        return ChoiceOutput(
            tool_format=self.model.tool_format if self.tools and not self.raw_output else None,
            reasoning_format=None if self.raw_output else self.model.reasoning_format,
            starts_in_reasoning=self.starts_in_reasoning,
            single_call=self.single_call,
            tools={tool.name: tool.parameters or {} for tool in self.tools},
            strip_tokens=self.strip_tokens,
        )


def special_markers(model: ServedModel, *, with_tools: bool) -> frozenset[str]:
    """The markers of this model's active formats that its tokenizer declares special tokens:
    decoding must keep them for the parsers to see (``ovserve.parsers.base``)."""
    return format_markers(model.tool_format if with_tools else None, model.reasoning_format) & model.special_tokens


def _content(message: Message, first_image: int) -> str | None:
    """A message's text for the template: text parts joined by newlines, an image placeholder
    where each image was (numbered across the conversation, right next to its neighbours:
    openvino_genai adds its own separator). No text and only tool calls: null, as OpenAI sends."""
    pieces: list[str] = []
    previous_was_text = False
    image = first_image
    for part in message.parts:
        if isinstance(part, Text):
            pieces.append(("\n" if previous_was_text else "") + part.text)
            previous_was_text = True
        elif isinstance(part, Image):
            pieces.append(image_tag(image))
            image += 1
            previous_was_text = False
    if not pieces and message.tool_calls:
        return None
    return "".join(pieces)


def template_messages(messages: list[Message]) -> list[TemplateMessage]:
    """The messages as HF chat templates read them, an image placeholder where each image was."""
    templated, first_image = [], 0
    for message in messages:
        templated.append(template_message(message, _content(message, first_image)))
        first_image += len(message.images)
    return templated


def _grammar(conversation: Conversation, model: ServedModel, tools: list[Tool], raw: bool) -> GrammarSpec | None:
    """The engine grammar for the output format or a forced tool call (they exclude each other)."""
    from_format = response_format_grammar(conversation.output_format)
    if not conversation.forces_tool_call:
        guide = model.settings.enable_tool_guided_generation and tools and from_format is None
        if guide and not raw:
            return guided_tool_calls_grammar(model.tool_format, tools, param=conversation.tool_choice_origin)
        return from_format
    if conversation.output_format is not None:
        raise BadRequestError(
            f"{conversation.output_format.origin} cannot constrain a forced tool call; send one of them",
            param=conversation.output_format.origin,
        )
    return forced_tool_call_grammar(model.tool_format, tools, param=conversation.tool_choice_origin)


def joined_late_system(messages: list[Message]) -> list[Message]:
    """``messages`` with every system message after the first other one joined to the leading
    system message (one made at the start when there is none), its parts in order after the
    leading message's own."""
    start = next((position for position, message in enumerate(messages) if message.role != "system"), len(messages))
    late = [message for message in messages[start:] if message.role == "system"]
    if not late:
        return messages
    rest = [message for message in messages[start:] if message.role != "system"]
    leading = list(messages[:start]) or [Message("system", late[0].content_origin)]
    head = leading[-1]
    joined = Message("system", head.content_origin, [*head.parts, *(part for m in late for part in m.parts)])
    return [*leading[:-1], joined, *rest]


@dataclass(slots=True)
class _Prompt:
    """A conversation rendered and tokenized: what both a job and a token count need."""

    model: ServedModel
    text: str  # the prompt as rendered (with the continuation)
    ids: list[int]  # a VLM's: with image tokens expanded (counting only)
    tools: list[Tool]
    images: list[ImageRequest]


class ChatGeneration:
    """Prepares chat jobs for the models of a registry (images through ``media``)."""

    def __init__(self, models: ModelRegistry, media: MediaResolver) -> None:
        self.models = models
        self.media = media

    async def _prompt(self, conversation: Conversation) -> _Prompt:
        model = ready_model(self.models, conversation.model)
        images = conversation.images
        planned: list[ImageRequest] = []
        if images and model.vision is None:
            holder = next(message for message in conversation.messages if message.images)
            raise UnsupportedParameterError(
                f"model '{model.name}' does not accept images ({holder.content_origin} has an image)",
                param=holder.content_origin,
            )
        if images:
            # Policy checks of every image first: no I/O yet, nothing contacted if one fails.
            planned = self.media.plan(images, param=conversation.prompt_origin)
        messages = conversation.messages
        if conversation.join_late_system and not (model.template and model.template.renders_late_system):
            messages = joined_late_system(messages)
        templated = template_messages(messages)
        tools = conversation.offered_tools()
        template_tools = [tool.template_object() for tool in tools] or None
        prompt = await model.render_prompt(
            templated, template_tools, conversation.template_variables(), param=conversation.prompt_origin
        )
        prompt += conversation.continuation
        counted = prompt
        if model.vision is not None:
            model.vision.check_prompt(prompt, len(planned), param=conversation.prompt_origin)
            counted = model.vision.expand_prompt(prompt)
        ids = await model.encode_prompt(counted, add_special_tokens=False, param=conversation.prompt_origin)
        return _Prompt(model, prompt, ids, tools, planned)

    async def count_tokens(self, conversation: Conversation) -> int:
        """The prompt tokens ``conversation`` would have: the model's own template, tools and
        tokenizer, with no engine work (a prompt that cannot fit is refused as for a job)."""
        return len((await self._prompt(conversation)).ids)

    async def prepare(self, conversation: Conversation) -> ChatJob:
        rendered = await self._prompt(conversation)
        model, prompt, prompt_ids, tools = rendered.model, rendered.text, rendered.ids, rendered.tools
        param = conversation.prompt_origin
        sampling = conversation.sampling
        params = sampling_params(sampling, model, prompt_tokens=len(prompt_ids), param=param)
        raw = not sampling.skip_special_tokens
        strip_tokens: frozenset[str] = frozenset()
        if not raw and (markers := special_markers(model, with_tools=bool(tools))):
            params = dataclasses.replace(params, skip_special_tokens=False)
            strip_tokens = model.special_tokens - markers
        grammar = _grammar(conversation, model, tools, raw)
        if grammar is not None:
            params = dataclasses.replace(params, structured_output=grammar)
        vision_prompt = None
        if model.vision is not None:
            # Downloads and decoding come last, for requests that passed every other check.
            vision_prompt = VisionPrompt(prompt, await self.media.load(rendered.images, model.vision.image_target))
        reasoning = model.reasoning_format
        return ChatJob(
            model=model,
            params=params,
            prompt_ids=prompt_ids,
            vision_prompt=vision_prompt,
            starts_in_reasoning=bool(reasoning and prompt.rstrip().endswith(reasoning.start)),
            tools=tools,
            raw_output=raw,
            single_call=not conversation.parallel_tool_calls,
            strip_tokens=strip_tokens,
        )
