"""``GET /v3/models`` and ``GET /v3/models/{name}``: OpenAI's model list and model object.

OpenAI's fields (``id``, ``object``, ``created``, ``owned_by``) are as OpenAI sends them. Each
model object also carries ovserve's extension ``ovserve``: the parsers its output goes through
(``tool_parser``, ``reasoning_parser``: the registry names chosen at load, null when that parsing
is off), so a client can see what detection picked without reading the server's log, and its
residency (``state``, ``pinned``, ``lazy_load``, ``idle_unload_timeout``, ``memory_bytes``,
``memory_estimate_bytes``, ``last_used``: ``ovserve.models.manager``), and while a start is under
way the engine's load stage (``load_stage``: ``starting``, ``compiling``, ``warming up``, and
``load_stage_seconds`` in it so far; null otherwise). Clients that do not know the key ignore it,
as OpenAI's SDKs do with unknown fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

from ovserve.dialects.body import Body
from ovserve.models.served import ServedModel
from ovserve.parsers import reasoning_parser_name, tool_parser_name

OWNED_BY = "ovserve"


# A model's residency as the manager describes it (``ModelResidency``'s fields).
Describe = Callable[[ServedModel], dict[str, Any]]


class ModelParsersInfo(Body):
    """The parsers a model's output goes through (set, or detected at load), and its residency."""

    tool_parser: str | None
    reasoning_parser: str | None
    state: Literal["loaded", "loading", "unloading", "unloaded", "failed"]  # ModelState
    pinned: bool
    lazy_load: bool
    idle_unload_timeout: float | None
    memory_bytes: int | None  # measured, while loaded
    memory_estimate_bytes: int | None  # what the memory budget counts for it
    last_used: int | None  # Unix time of its last request
    # The engine's load stage while a start (a load, a restart) is under way, and the seconds in it.
    load_stage: Literal["starting", "compiling", "warming up"] | None  # LoadStage
    load_stage_seconds: float | None

    @classmethod
    def of(cls, model: ServedModel, residency: dict[str, Any]) -> ModelParsersInfo:
        """The names chosen at load (what the log line says: ``lfm2``, not the ``pythonic`` format
        it shares), else the formats' registry names."""
        if model.parsers is not None:
            names = {"tool_parser": model.parsers.tool.name, "reasoning_parser": model.parsers.reasoning.name}
        else:
            names = {
                "tool_parser": tool_parser_name(model.tool_format),
                "reasoning_parser": reasoning_parser_name(model.reasoning_format),
            }
        return cls.model_validate({**residency, **names})


class ModelObject(Body):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    # A LoRA adapter of an image model: the model it adapts (vLLM lists LoRA models so).
    parent: str | None = None
    ovserve: ModelParsersInfo  # ovserve's extension

    @classmethod
    def of(cls, model: ServedModel, describe: Describe) -> ModelObject:
        return cls(
            id=model.name,
            object="model",
            created=model.created,
            owned_by=OWNED_BY,
            ovserve=ModelParsersInfo.of(model, describe(model)),
        )


class ModelList(Body):
    object: Literal["list"]
    data: list[ModelObject]

    @classmethod
    def of(cls, models: Iterable[ServedModel], describe: Describe) -> ModelList:
        """Every model, each followed by its LoRA adapters (an image model's: a request names one as its model)."""
        data = []
        for model in models:
            listed = ModelObject.of(model, describe)
            data.append(listed)
            for alias in model.spec.images.aliases:
                data.append(ModelObject.model_validate({**listed.dump(), "id": alias, "parent": model.name}))
        return cls(object="list", data=data)
