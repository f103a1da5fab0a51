"""Served models: the engine plus what the server process needs to prepare requests for it.

A served model does not decide when its engine runs: it asks its :class:`Leases` (the residency
manager, ``ovserve.models.manager``, which adopts every model it serves). The protocol is defined
here, below the manager, so that the model depends on what it asks and not on who answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fnmatch
import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ovserve.engine.client import EngineClient
from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.errors import (
    BadRequestError,
    ContextLengthExceededError,
    ModelNotFoundError,
    ServiceUnavailableError,
)
from ovserve.json_types import JsonObject
from ovserve.models.admission import Admission
from ovserve.models.chat_template import ChatTemplate, TemplateMessage
from ovserve.models.defaults import ModelDefaults
from ovserve.models.drafting import DraftingStats
from ovserve.models.residency import Lease, Residency
from ovserve.models.threads import started_thread
from ovserve.models.tokenizer import PromptTokenizer, open_tokenizer
from ovserve.models.vision import VisionModel
from ovserve.parsers import ModelParsers, choose_parsers
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat
from ovserve.parsers.detect import read_chat_template, read_special_tokens
from ovserve.settings.resources import resolve_cache_dir
from ovserve.settings.schema import ModelSettings, ServerSettings, read_context_length

log = logging.getLogger(__name__)

# Conversations shorter than this (characters of message text) render on the event loop: a
# thread hop would cost more than the rendering.
_INLINE_RENDER_CHARS = 64 * 1024


class Leases(Protocol):
    """Who holds models' engines for requests and loads them on demand (the residency manager)."""

    def unavailable(self, model: ServedModel) -> ServiceUnavailableError | None:
        """The 503 a request to ``model`` gets at once; None when it is, or will be, loaded for it."""
        ...

    async def lease(self, model: ServedModel, deadline: float | None, *, keep_alive: float | None = None) -> Lease:
        """Hold ``model``'s engine for one request, loaded first if need be (until ``deadline``)."""
        ...


@dataclass
class ServedModel:
    settings: ModelSettings
    spec: EngineSpec
    engine: EngineClient
    tokenizer: PromptTokenizer  # counts and encodes prompts, on its own thread
    template: ChatTemplate | None
    defaults: ModelDefaults
    context_length: int
    # This model's queue limits and counts (429 beyond them; the queue-depth metric).
    admission: Admission
    created: int = 0
    vision: VisionModel | None = None  # set for a VLM (the model dir has a vision encoder)
    # How this model writes tool calls and reasoning (graph options, else detected at load:
    # ovserve.parsers.choose_parsers).
    tool_format: ToolCallFormat | None = None
    reasoning_format: ReasoningFormat | None = None
    # The names chosen for them at load and why (None: the formats were set directly).
    parsers: ModelParsers | None = None
    # The texts of the tokenizer's special tokens (formats whose markers are special need them kept).
    special_tokens: frozenset[str] = frozenset()
    # Renders long conversations off the event loop (see render_prompt); started at load.
    template_thread: concurrent.futures.ThreadPoolExecutor = field(default_factory=lambda: started_thread("template"))
    drafting: DraftingStats = field(default_factory=DraftingStats)  # speculative / prompt lookup only
    # Whether its engine runs, and who holds it (ovserve.models.manager adopts every served model).
    residency: Residency = field(default_factory=Residency)
    # Who leases its engine to requests; None (a model no manager adopted: the fast tests' bare
    # registries) serves it as a model loaded at start, whose lease only checks its engine.
    leases: Leases | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> PipelineKind:
        return self.spec.kind

    @property
    def task(self) -> str:
        return self.settings.task

    def check_available(self) -> None:
        """The 503 of a request to this model that cannot be served nor loaded for it now (loading
        at start, restarting, a failed load in its backoff); before any work."""
        if self.leases is not None:
            error = self.leases.unavailable(self)
        else:
            error = None if self.engine.ready else self.engine.not_ready_error()
        if error is not None:
            raise error

    async def lease(self, deadline: float | None, *, keep_alive: float | None = None) -> Lease:
        """Hold this model's engine for one request, loaded (waiting until ``deadline``, event-loop
        time, for a load on demand); release the lease when the request ends. ``keep_alive``: how
        long the model stays loaded after its last request (``ResidencyManager.keep_alive``)."""
        if self.leases is None:  # no residency to keep: served as loaded for the server's life
            self.check_available()
            return Lease(self.residency)
        return await self.leases.lease(self, deadline, keep_alive=keep_alive)

    def close(self) -> None:
        """Stop the server-side threads (the config no longer serves this model)."""
        self.tokenizer.close()
        self.template_thread.shutdown(wait=False)

    def require_task(self, task: str) -> None:
        """A 400 when this model serves another task (chat sent to an embeddings model...)."""
        if self.task != task:
            raise BadRequestError(
                f"model '{self.name}' serves {self.task.replace('_', ' ')}, not {task.replace('_', ' ')}",
                param="model",
                code="wrong_model_task",
            )

    @property
    def max_tokens_limit(self) -> int | None:
        return self.settings.max_tokens_limit

    @property
    def step_token_limit(self) -> int | None:
        """Without dynamic split-fuse the engine must take a prompt in one step (a longer one makes
        ``step()`` raise): the most prompt tokens a step holds; None when prompts may span steps."""
        scheduler = self.spec.scheduler
        if self.kind.continuous_batching and not scheduler.dynamic_split_fuse:
            return scheduler.max_num_batched_tokens
        return None

    def check_prompt_length(self, prompt_tokens: int, *, param: str) -> None:
        """A prompt longer than a step (see :attr:`step_token_limit`) is the client's 400."""
        step = self.step_token_limit
        if step is not None and prompt_tokens > step:
            raise ContextLengthExceededError(
                f"the prompt has {prompt_tokens} tokens but model '{self.name}' takes at most "
                f"{step} per step (max_num_batched_tokens, dynamic_split_fuse off)",
                param=param,
                prompt_tokens=prompt_tokens,
                maximum=step,
            )

    @property
    def prompt_token_limit(self) -> int:
        """The most prompt tokens a request may have: room for one generated token in the context,
        and at most one engine step's worth when prompts cannot span steps."""
        step = self.step_token_limit
        return self.context_length - 1 if step is None else min(self.context_length - 1, step)

    @property
    def best_of_limit(self) -> int:
        return self.settings.best_of_limit

    @property
    def prefix_caching(self) -> bool:
        """Whether the engine may serve prompt tokens from its prefix cache (the stateful pipeline
        never does): with it off a request's cached tokens are 0; with it on the engine counts them."""
        return self.kind.continuous_batching and self.spec.scheduler.enable_prefix_caching

    @classmethod
    def load(cls, settings: ModelSettings, server: ServerSettings) -> ServedModel:
        """Read the model directory (blocking: call from a thread at startup)."""
        spec = settings.engine_spec(compile_cache_dir(server))

        # An image model's tokenizer and text encoder have their folders (diffusers' layout); the
        # tokenizer counts prompt tokens, the encoder's config says how many it reads.
        image_model = spec.kind is PipelineKind.IMAGE_GENERATION
        tokenizer = open_tokenizer(
            spec.model_path / "tokenizer" if image_model else spec.model_path
        )  # its word cache off: clients cannot grow it
        source = tokenizer.chat_template or read_chat_template(spec.model_path)
        template = None
        if source:
            template = ChatTemplate(source, bos_token=tokenizer.get_bos_token(), eos_token=tokenizer.get_eos_token())
            template.compile()
        elif spec.kind.generates:
            log.warning("model %r has no chat template; /chat/completions will refuse requests", spec.name)
        special_tokens = read_special_tokens(spec.model_path)
        parsers = choose_parsers(
            tool_parser=settings.tool_parser,
            reasoning_parser=settings.reasoning_parser,
            chat_template=source,
            special_tokens=special_tokens,
        )
        if spec.kind.generates:
            log.info("model %r: %s", spec.name, parsers.describe())
        return cls(
            settings=settings,
            spec=spec,
            engine=EngineClient(
                spec,
                log_level=logging.getLevelName(server.log_level.upper()),
                stall_timeout=server.engine_stall_timeout,
                step_timeout=server.engine_step_timeout,
            ),
            tokenizer=PromptTokenizer(tokenizer, spec.name),
            template=template,
            defaults=ModelDefaults.load(spec.model_path, settings.generation_config_path),
            context_length=spec.max_input_tokens
            or read_context_length(spec.model_path / "text_encoder" if image_model else spec.model_path),
            created=int(time.time()),
            vision=VisionModel.detect(spec.model_path),
            tool_format=parsers.tool_format,
            reasoning_format=parsers.reasoning_format,
            parsers=parsers,
            special_tokens=special_tokens,
            admission=Admission(spec.name, server.max_queued_requests, server.max_prompt_tokens_in_flight),
        )

    def render_chat(
        self,
        messages: list[TemplateMessage],
        tools: list[JsonObject] | None,
        template_kwargs: JsonObject | None,
        param: str = "messages",
    ) -> str:
        """The prompt of ``messages`` (``param``: what a template's refusal names)."""
        if self.template is None:
            raise BadRequestError(f"model '{self.name}' has no chat template", param=param)
        return self.template.render(messages, tools=tools, template_kwargs=template_kwargs, param=param)

    async def render_prompt(
        self,
        messages: list[TemplateMessage],
        tools: list[JsonObject] | None,
        template_kwargs: JsonObject | None,
        *,
        param: str,
    ) -> str:
        """:meth:`render_chat` for a request: a long conversation renders on the template thread.

        Rendering is Python code, which a thread gives up the GIL from every few milliseconds;
        on the event loop a multi-megabyte conversation would hold every stream for its whole
        rendering.
        """
        size = sum(len(message["content"] or "") for message in messages)
        if size < _INLINE_RENDER_CHARS:
            return self.render_chat(messages, tools, template_kwargs, param)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.template_thread, functools.partial(self.render_chat, messages, tools, template_kwargs, param)
        )

    async def encode_prompt(self, prompt: str, *, add_special_tokens: bool, param: str) -> list[int]:
        """The prompt's ids, refused (400) as soon as it is known not to fit this model."""
        return await self.tokenizer.encode(
            prompt, add_special_tokens=add_special_tokens, limit=self.prompt_token_limit, param=param
        )


def compile_cache_dir(server: ServerSettings) -> Path | None:
    """--cache_dir, created if need be; None (no cache, a warning) when it cannot be."""
    if server.cache_dir is None:
        return None
    path = resolve_cache_dir(server.cache_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("--cache_dir %s cannot be created (%s): models are compiled at every load", path, exc)
        return None
    return path


class ModelRegistry:
    """The served models by name; a config reload adds, replaces and removes them."""

    def __init__(self, models: list[ServedModel]) -> None:
        self._models = {model.name: model for model in models}

    def add(self, model: ServedModel) -> ServedModel | None:
        """Serve ``model`` under its name; the model it replaces, if any."""
        previous = self._models.get(model.name)
        self._models[model.name] = model
        return previous

    def remove(self, name: str) -> ServedModel | None:
        return self._models.pop(name, None)

    def get(self, name: str, *, list_served: bool = True) -> ServedModel:
        """The model named ``name``, or else the first whose aliases (glob patterns) match it.

        Not found: a 404 that lists the served names, unless ``list_served`` is False: a route
        open to callers without a key (``/v2/models/{name}/ready``) must not name the models to
        anyone who reaches the port when the server has keys."""
        model = self._models.get(name) or self._aliased(name)
        if model is None:
            available = f" (available: {', '.join(sorted(self._models)) or 'none'})" if list_served else ""
            raise ModelNotFoundError(f"model '{name}' is not served here{available}", param="model")
        return model

    def _aliased(self, name: str) -> ServedModel | None:
        """The model one of whose LoRA adapters is called ``name`` (vLLM's LoRA models), else the
        first whose aliases match it."""
        for model in self._models.values():
            if name in model.settings.images.aliases:
                return model
        for model in self._models.values():
            if any(fnmatch.fnmatchcase(name, alias) for alias in model.settings.aliases):
                return model
        return None

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)
