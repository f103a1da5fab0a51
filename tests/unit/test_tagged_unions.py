"""Discriminated unions tagged from their members (ovserve.dialects.tagged): what a client reads
when a body's union member is wrong, and what serializing a validated request does."""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from ovserve.dialects.anthropic.request import MessagesRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.tagged import ByType, StrOrList
from ovserve.errors import complaints


class Cat(BaseModel):
    type: Literal["cat", "kitten"]
    lives: int


class Dog(BaseModel):
    type: Literal["dog"] = "dog"


class Other(BaseModel):
    type: str


Pet = Annotated[Cat | Dog, ByType()]
Pets = Annotated[str | list[Pet], StrOrList()]


def problems(adapter: TypeAdapter[object], value: object) -> list[tuple[str | None, str]]:
    with pytest.raises(ValidationError) as caught:
        adapter.validate_python(value)
    return [(complaint.param, complaint.message) for complaint in complaints(caught.value)]


def test_each_member_is_chosen_by_the_values_of_its_type_literal() -> None:
    adapter = TypeAdapter(Pet)
    assert isinstance(adapter.validate_python({"type": "kitten", "lives": 9}), Cat)
    assert isinstance(adapter.validate_python({"type": "dog"}), Dog)
    assert problems(adapter, {"type": "cat"}) == [("lives", "Field required")]
    assert problems(adapter, {"type": "bird"}) == [("type", "Input should be 'cat' or 'dog'")]
    assert problems(adapter, 3) == [(None, "Input should be a valid dictionary")]


def test_an_object_without_type_is_the_member_whose_type_has_a_default() -> None:
    assert isinstance(TypeAdapter(Pet).validate_python({}), Dog)
    assert problems(TypeAdapter(Pet), {"type": None}) == [("type", "Field required")]
    assert problems(TypeAdapter(Annotated[Cat, ByType()]), {}) == [("type", "Field required")]


def test_a_member_without_a_type_literal_takes_every_other_type() -> None:
    adapter = TypeAdapter(Annotated[Cat | Other, ByType()])
    assert isinstance(adapter.validate_python({"type": "cat", "lives": 1}), Cat)
    assert adapter.validate_python({"type": "bird"}) == Other(type="bird")


def test_a_string_or_list_field_names_the_items_of_a_list() -> None:
    adapter = TypeAdapter(Pets)
    assert adapter.validate_python("rex") == "rex"
    assert problems(adapter, [{"type": "dog"}, {"type": "cow"}]) == [("1.type", "Input should be 'cat' or 'dog'")]
    assert problems(adapter, 5) == [(None, "Input should be a string or a list")]


def test_a_union_of_something_else_than_models_is_refused_when_its_schema_is_built() -> None:
    with pytest.raises(TypeError, match="is not a model"):
        TypeAdapter(Annotated[Cat | int, ByType()])
    with pytest.raises(TypeError, match="neither str nor a list"):
        TypeAdapter(Annotated[str | int, StrOrList()])


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (
            MessagesRequest,
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "tools": [{"name": "t", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "auto"},
                "thinking": {"type": "adaptive"},
            },
        ),
        (
            ResponsesRequest,
            {"model": "m", "input": [{"role": "user", "content": "hi"}], "text": {"format": {"type": "text"}}},
        ),
    ],
)
def test_a_validated_request_serializes_without_warnings(model: type[BaseModel], body: dict[str, object]) -> None:
    # A discriminator that reads only JSON objects made pydantic warn, and fall back to trying each
    # member, for every union member it serialized.
    request = model.model_validate(body)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dumped = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert model.model_validate(dumped) == request
