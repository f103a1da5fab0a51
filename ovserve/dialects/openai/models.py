"""``GET /v3/models`` and ``GET /v3/models/{name}``: OpenAI's model list and model object.

OpenAI's fields (``id``, ``object``, ``created``, ``owned_by``) are as OpenAI sends them. Each
model object also carries ovserve's extension ``ovserve``: the parsers its output goes through
(``tool_parser``, ``reasoning_parser``: the registry names chosen at load, null when that parsing
is off), so a client can see what detection picked without reading the server's log. Clients
that do not know the key ignore it, as OpenAI's SDKs do with unknown fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ovserve.dialects.body import Body
from ovserve.models.served import ServedModel
from ovserve.parsers import reasoning_parser_name, tool_parser_name

OWNED_BY = "ovserve"


class ModelParsersInfo(Body):
    """The parsers a model's output goes through (set, or detected at load)."""

    tool_parser: str | None
    reasoning_parser: str | None

    @classmethod
    def of(cls, model: ServedModel) -> ModelParsersInfo:
        """The names chosen at load (what the log line says: ``lfm2``, not the ``pythonic`` format
        it shares), else the formats' registry names."""
        if model.parsers is not None:
            return cls(tool_parser=model.parsers.tool.name, reasoning_parser=model.parsers.reasoning.name)
        return cls(
            tool_parser=tool_parser_name(model.tool_format),
            reasoning_parser=reasoning_parser_name(model.reasoning_format),
        )


class ModelObject(Body):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    ovserve: ModelParsersInfo  # ovserve's extension

    @classmethod
    def of(cls, model: ServedModel) -> ModelObject:
        return cls(
            id=model.name,
            object="model",
            created=model.created,
            owned_by=OWNED_BY,
            ovserve=ModelParsersInfo.of(model),
        )


class ModelList(Body):
    object: Literal["list"]
    data: list[ModelObject]

    @classmethod
    def of(cls, models: Iterable[ServedModel]) -> ModelList:
        return cls(object="list", data=[ModelObject.of(model) for model in models])
