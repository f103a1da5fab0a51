"""Discriminated unions of request models, tagged from the members themselves.

A union is written once, as its members: ``Annotated[A | B | C, ByType()]`` for objects told apart
by their ``type``, ``Annotated[str | list[X], StrOrList()]`` for a string-or-list field. The
markers build what pydantic needs (a callable :class:`~pydantic.Discriminator` and a
:class:`~pydantic.Tag` on every member) when the model's schema is built, so a ``type`` value is
written in one place: the member's ``Literal`` field. mypy reads the plain union.

The tags are :func:`ovserve.errors.tag` names (``<text>``), which ``ovserve.errors`` drops from a
validation error's location, so the error names the client's JSON path
(``messages.2.content.0.source.media_type``).

:class:`ByType`'s rules, read from the members' ``type`` fields:

- a member is chosen by the values of its ``type`` Literal (the first names its tag, so an unknown
  type is "Input should be 'text' or 'image'");
- a member whose ``type`` has a default is what an object without ``type`` is (the Responses
  API's "easy input message"); when that default is ``None``, a ``null`` type chooses it too;
- a member whose ``type`` is no Literal (a plain ``str``) takes every other type value (the
  Anthropic server tools, each refused by its own validator);
- a validated model (serializing) is its own member;
- a value that is no object has no tag: pydantic's "union tag not found", a complaint about its
  shape, as is an object without ``type`` when no member has a default.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Discriminator, GetCoreSchemaHandler, Tag
from pydantic_core import CoreSchema

from ovserve.errors import str_or_list, tag


def _members(source: Any) -> tuple[Any, ...]:
    """The members of a union (``A | B`` or ``Union[A, B]``), or the one type that is no union."""
    if get_origin(source) in (Union, types.UnionType):
        return get_args(source)
    return (source,)


def _literals(annotation: Any) -> list[str]:
    """The string values of the Literal(s) in ``annotation`` (``Literal["a"] | None`` -> ["a"])."""
    if get_origin(annotation) is Literal:
        return [value for value in get_args(annotation) if isinstance(value, str)]
    return [value for member in get_args(annotation) for value in _literals(member)]


class ByType:
    """Marks a union of models as discriminated by their ``type`` field (see the module doc)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        choices: dict[str, str] = {}  # type value -> its member's tag name
        tagged: list[Any] = []
        names: list[str] = []
        default: str | None = None  # the tag of what an object without type is
        null_is_default = False
        otherwise: str | None = None  # the tag of the member that takes any other type
        for member in _members(source):
            if not (isinstance(member, type) and issubclass(member, BaseModel)):
                raise TypeError(f"ByType: {member!r} is not a model")
            field = member.model_fields["type"]
            values = _literals(field.annotation)
            name = values[0] if values else member.__name__
            if not values:
                otherwise = name
            choices.update(dict.fromkeys(values, name))
            if not field.is_required():
                default = name
                null_is_default = field.default is None
            names.append(name)
            tagged.append(Annotated[member, Tag(tag(name))])

        by_class = {member: name for member, name in zip(_members(source), names, strict=True)}

        def discriminate(value: Any) -> str | None:
            if isinstance(value, BaseModel):  # serializing a validated model: its own member
                name = by_class.get(type(value))
                return None if name is None else tag(name)
            if not isinstance(value, dict):
                return None
            kind = value.get("type")
            if kind is None:
                missing = "type" not in value or null_is_default
                return tag(default) if default is not None and missing else None
            name = kind if isinstance(kind, str) else repr(kind)
            return tag(choices.get(name, otherwise or name))

        return handler.generate_schema(Annotated[Union[tuple(tagged)], Discriminator(discriminate)])  # noqa: UP007


class StrOrList:
    """Marks ``str | list[X]`` as told apart by the value's shape (a list's error names its items)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        tagged = [Annotated[member, Tag(tag(_shape(member)))] for member in _members(source)]
        return handler.generate_schema(Annotated[Union[tuple(tagged)], Discriminator(str_or_list)])  # noqa: UP007


def _shape(member: Any) -> str:
    if member is str:
        return "str"
    if get_origin(member) is list:
        return "list"
    raise TypeError(f"StrOrList: {member!r} is neither str nor a list")
