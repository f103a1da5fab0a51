"""Building blocks of the fast layer (see ``conftest.py``): a model without files, the app, SSE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.engine.client import EngineClient
from ovserve.engine.spec import EngineSpec, PipelineKind, SchedulerSettings
from ovserve.models.admission import Admission
from ovserve.models.chat_template import ChatTemplate
from ovserve.models.defaults import ModelDefaults
from ovserve.models.served import ServedModel
from ovserve.models.tokenizer import PromptTokenizer
from ovserve.parsers import hermes
from ovserve.parsers.base import ToolCallFormat
from ovserve.settings.schema import ModelSettings, ServerSettings, Task
from tests.fast.scripted_engine import Script, ScriptedLauncher, reply

MODEL = "fast-model"

# Enough of a chat template to render roles, tools (Hermes style) and the generation prompt.
TEMPLATE = (
    "{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}"
    "{% for message in messages %}<|{{ message.role }}|>{{ message.content }}\n{% endfor %}"
    "<|assistant|>"
)


@dataclass
class _Ids:
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass
class _Encoded:
    input_ids: _Ids


@dataclass
class _EncodedBatch:
    input_ids: _Ids
    attention_mask: _Ids


class CharTokenizer:
    """An ``openvino_genai.Tokenizer`` look-alike: one token per character (BOS = 1 if asked); a
    list of texts is a batch padded to its longest, with its attention mask."""

    def encode(self, text: str | list[str], add_special_tokens: bool = True) -> _Encoded | _EncodedBatch:
        if isinstance(text, list):
            rows = [self._ids(one, add_special_tokens) for one in text]
            width = max(len(row) for row in rows)
            ids = np.array([row + [0] * (width - len(row)) for row in rows], dtype=np.int64)
            mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in rows], dtype=np.int64)
            return _EncodedBatch(_Ids(ids), _Ids(mask))
        return _Encoded(_Ids(np.array([self._ids(text, add_special_tokens)], dtype=np.int64)))

    @staticmethod
    def _ids(text: str, add_special_tokens: bool) -> list[int]:
        return ([1] if add_special_tokens else []) + [ord(char) for char in text]

    def get_vocab(self) -> dict[str, int]:
        return {chr(code): code for code in range(32, 127)}


@dataclass
class FastModel:
    model: ServedModel
    launcher: ScriptedLauncher

    def prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """What usage.prompt_tokens must say for this conversation (one token per character)."""
        return len(self.model.render_chat(messages, tools, None))


def fast_model(
    script: Script | None = None,
    *,
    name: str = MODEL,
    kind: PipelineKind = PipelineKind.CONTINUOUS_BATCHING,
    context_length: int = 4096,
    defaults: dict[str, Any] | None = None,
    max_tokens_limit: int | None = None,
    stall_timeout: float = ServerSettings.model_fields["engine_stall_timeout"].default,
    step_timeout: float = ServerSettings.model_fields["engine_step_timeout"].default,
    template: str = TEMPLATE,
    tool_format: ToolCallFormat = hermes.FORMAT,
    task: Task = "text_generation",
    clock: Clock = SYSTEM_CLOCK,
) -> FastModel:
    """A served model without model files: scripted engine, character tokenizer, Hermes tool calls
    (unless ``tool_format`` says otherwise), the small chat template above (unless ``template``).
    ``task="embeddings"``: an embeddings model (the scripted engine's ``embedding`` of each text).
    ``clock``: the engine client's (its stall watchdog, its restart delays) and the scripted
    engine's (its heartbeats, long steps and CPU time): a test's ManualClock moves them by hand."""
    launcher = ScriptedLauncher(script or reply("Hello", "!"), clock=clock)
    # model_construct: the settings' checks want an exported model directory.
    settings = ModelSettings.model_construct(
        name=name, path=Path("/nonexistent/fast-model"), max_tokens_limit=max_tokens_limit, task=task
    )
    # The scripted engine caches nothing: prefix caching off, so cached_tokens is known to be 0.
    scheduler = SchedulerSettings(enable_prefix_caching=False)
    spec = EngineSpec(name=name, model_path=settings.path, kind=kind, scheduler=scheduler)
    model = ServedModel(
        settings=settings,
        spec=spec,
        engine=EngineClient(
            spec, launcher=launcher, stall_timeout=stall_timeout, step_timeout=step_timeout, clock=clock
        ),
        tokenizer=PromptTokenizer(CharTokenizer(), name),
        template=ChatTemplate(template),
        defaults=ModelDefaults(defaults or {}),
        context_length=context_length,
        tool_format=tool_format,
        admission=Admission(name, ServerSettings.model_fields["max_queued_requests"].default),
    )
    return FastModel(model, launcher)


@dataclass
class Served:
    """A running app and what serves it."""

    client: TestClient
    models: list[FastModel] = field(default_factory=list)

    @property
    def engine(self) -> Any:
        """The scripted engine of the first model, as last (re)started."""
        return self.models[0].launcher.engine

    async def chat(self, **body: Any) -> tuple[int, Any]:
        """POST /v3/chat/completions; (status, JSON body) or (status, parsed SSE events) when streaming."""
        return await self.post("/v3/chat/completions", body)

    async def completion(self, **body: Any) -> tuple[int, Any]:
        return await self.post("/v3/completions", body)

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        body = {"model": MODEL, **body}
        async with self.client.post(path, json=body) as response:
            if response.content_type == "text/event-stream":
                return response.status, parse_sse(await response.text())
            return response.status, await response.json()


def parse_sse(text: str) -> list[Any]:
    """The ``data:`` payloads of an event stream, JSON-decoded except the final ``[DONE]``.

    A named event (the Responses API's ``event:`` line) must name its payload's ``type``.
    """
    events: list[Any] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = None
        if block.startswith("event: "):
            name, _, block = block.removeprefix("event: ").partition("\n")
        assert block.startswith("data: "), block
        payload = block.removeprefix("data: ")
        events.append(payload if payload == "[DONE]" else json.loads(payload))
        assert name is None or events[-1]["type"] == name, (name, events[-1])
    return events


def choices_by_index(events: list[Any]) -> dict[int, list[dict[str, Any]]]:
    """Stream chunks' choices, grouped by choice index, in arrival order."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if isinstance(event, dict):
            for choice in event.get("choices", []):
                grouped.setdefault(choice["index"], []).append(choice)
    return grouped


def streamed_text(choices: list[dict[str, Any]], key: str = "content") -> str:
    return "".join(choice["delta"].get(key) or "" for choice in choices)


async def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds (something another thread does, such as the engine's)."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still false after {timeout} s: {condition}")
