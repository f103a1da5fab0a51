"""Renders a model's chat template (Jinja2, as Hugging Face does) into the prompt text.

Templates are model-supplied code, so they run in Jinja2's immutable sandbox with the helpers
HF templates expect (``raise_exception``, ``tojson``, ``strftime_now``).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from typing import Any, Required, TypedDict

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ovserve.errors import BadRequestError
from ovserve.json_types import JsonObject, JsonValue

# Values the renderer provides itself; chat_template_kwargs may not replace them (OVMS rule).
RESERVED_TEMPLATE_VARIABLES = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception"}
)


class TemplateError(Exception):
    """The template itself raised (``raise_exception``) or failed on this conversation."""


class TemplateToolCall(TypedDict):
    id: str | None
    type: str
    function: dict[str, JsonValue]  # name, and arguments as a mapping (templates apply tojson)


class TemplateMessage(TypedDict, total=False):
    """One message as Hugging Face chat templates read it."""

    role: Required[str]
    content: Required[str | None]
    name: str
    tool_call_id: str
    reasoning_content: str
    tool_calls: list[TemplateToolCall]


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self._bos = bos_token
        self._eos = eos_token

    @cached_property
    def _template(self) -> jinja2.Template:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        return env.from_string(self.source)

    @cached_property
    def renders_late_system(self) -> bool:
        """Whether a system message after the first user message is rendered in place (Qwen's
        templates do; many others refuse it, or drop it silently)."""
        probe = "ovserve: late system message probe"
        messages: list[TemplateMessage] = [{"role": "user", "content": "hi"}, {"role": "system", "content": probe}]
        try:
            return probe in self.render(messages)
        except BadRequestError:
            return False

    def compile(self) -> None:
        """Fail at startup, not on the first request, if the template is not valid Jinja2."""
        _ = self._template

    def render(
        self,
        messages: list[TemplateMessage],
        *,
        tools: list[JsonObject] | None = None,
        template_kwargs: JsonObject | None = None,
        param: str = "messages",
    ) -> str:
        """The prompt of ``messages``; a template that refuses them is a 400 naming ``param``."""
        extra = dict(template_kwargs or {})
        clashing = sorted(RESERVED_TEMPLATE_VARIABLES & extra.keys())
        if clashing:
            raise BadRequestError(
                f"chat_template_kwargs may not set {', '.join(clashing)}: the server provides them",
                param="chat_template_kwargs",
            )
        try:
            return self._template.render(
                **extra,
                messages=messages,
                tools=tools,
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
            )
        except TemplateError as exc:
            raise BadRequestError(f"the model's chat template rejected the conversation: {exc}", param=param) from exc
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise BadRequestError(f"the model's chat template failed on this conversation: {exc}", param=param) from exc
