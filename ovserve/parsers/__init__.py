"""Tool-call and reasoning parsers, one registry keyed by the names graphs use.

``tool_parser`` / ``reasoning_parser`` (a graph's options, ``ovserve serve``'s flags) pick the
format by name; ``none`` turns that parsing off; unset, the parser is detected from the model's
chat template and special tokens (:mod:`ovserve.parsers.detect`). :func:`choose_parsers` is that
precedence, in one place, with the reason for each choice (the server logs it at load). The
detection functions stay in their module (``detect.detect_tool_parser``): this package's old
``detect_tool_parser`` returned a format, and an import of that name should fail, not change meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from ovserve.parsers import (
    deepseek,
    detect,
    devstral,
    gemma4,
    glm4,
    gptoss,
    granite,
    hermes,
    kimi,
    llama3,
    minicpm,
    minicpm5,
    mistral,
    phi4,
    pythonic,
    qwen3coder,
)
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat

TOOL_PARSERS: dict[str, ToolCallFormat] = {
    "hermes3": hermes.FORMAT,
    "qwen3": hermes.FORMAT,  # Qwen 2.5 / 3 use the Hermes format
    "qwen3coder": qwen3coder.FORMAT,  # also Qwen3.5 / Qwen3.6 and MiniCPM-V 4.6
    "glm4": glm4.FORMAT,
    "glm45": glm4.FORMAT,  # GLM-4.5 / 4.6 (vLLM's and SGLang's name)
    "glm47": glm4.FORMAT_47,  # GLM-4.7: the same without newlines between the tags
    "minicpm": minicpm.FORMAT,  # MiniCPM3 / MiniCPM4
    "minicpm5": minicpm5.FORMAT,  # MiniCPM5 (OVMS's, vLLM's and SGLang's name)
    "llama3": llama3.FORMAT,
    "mistral": mistral.FORMAT,
    "phi4": phi4.FORMAT,
    "gptoss": gptoss.FORMAT,
    "gemma4": gemma4.FORMAT,
    "deepseek_v31": deepseek.TOOL_FORMAT,
    "kimi_k2": kimi.FORMAT,
    "pythonic": pythonic.FORMAT,
    "llama4_pythonic": pythonic.FORMAT,  # vLLM's name for Llama 4's pythonic calls
    "lfm2": pythonic.FORMAT,  # OVMS's name; LFM2 writes the list between <|tool_call_start|> and <|tool_call_end|>
    "devstral": devstral.FORMAT,
    "granite": granite.TOOL_FORMAT,
}

_THINK = ReasoningFormat(name="qwen3", start="<think>", end="</think>")
REASONING_PARSERS: dict[str, ReasoningFormat] = {
    "qwen3": _THINK,
    "minicpm5": _THINK,  # OVMS's name for MiniCPM5's <think> (its parser reads the same tokens)
    # MiniCPM3 / MiniCPM4's thought before a call (MiniCPM4.1's hybrid reasoning is qwen3's <think>).
    "minicpm": ReasoningFormat(
        name="minicpm",
        start="<|thought_start|>",
        end="<|thought_end|>",
        special_tokens=("<|thought_start|>", "<|thought_end|>"),
    ),
    "gptoss": gptoss.REASONING_FORMAT,
    "gemma4": gemma4.REASONING_FORMAT,
    "deepseek_r1": deepseek.REASONING_FORMAT,
    "mistral": mistral.REASONING_FORMAT,
    "granite": granite.REASONING_FORMAT,
}

# The tool_parser / reasoning_parser value that turns the parsing off (no detection either).
PARSER_OFF: Final = "none"


class UnknownParserError(ValueError):
    pass


def tool_parser(name: str) -> ToolCallFormat:
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        raise UnknownParserError(f"unknown tool_parser '{name}' (known: {', '.join(sorted(TOOL_PARSERS))})") from None


def reasoning_parser(name: str) -> ReasoningFormat:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise UnknownParserError(f"unknown reasoning_parser '{name}' (known: {known})") from None


@dataclass(frozen=True)
class ParserChoice:
    """One parser chosen for a model: its registry name (None: no parsing) and why."""

    name: str | None
    reason: str

    def describe(self, kind: str) -> str:
        return f"{kind} parser {self.name} ({self.reason})" if self.name else f"no {kind} parser ({self.reason})"


@dataclass(frozen=True)
class ModelParsers:
    """The parsers a model's output goes through, with the reasons they were chosen."""

    tool: ParserChoice
    reasoning: ParserChoice

    @property
    def tool_format(self) -> ToolCallFormat | None:
        return TOOL_PARSERS[self.tool.name] if self.tool.name else None

    @property
    def reasoning_format(self) -> ReasoningFormat | None:
        return REASONING_PARSERS[self.reasoning.name] if self.reasoning.name else None

    def describe(self) -> str:
        return f"{self.tool.describe('tool')}; {self.reasoning.describe('reasoning')}"


_Format = TypeVar("_Format", ToolCallFormat, ReasoningFormat)


def _choose(
    setting: str | None, setting_name: str, detection: detect.Detection, registry: Mapping[str, _Format]
) -> ParserChoice:
    if setting == PARSER_OFF:
        return ParserChoice(None, f"{setting_name}: {PARSER_OFF}")
    if setting is not None:
        if setting not in registry:
            known = ", ".join([*sorted(registry), PARSER_OFF])
            raise UnknownParserError(f"unknown {setting_name} '{setting}' (known: {known})")
        return ParserChoice(setting, f"{setting_name} setting")
    if detection.name is None:
        return ParserChoice(None, detection.reason)
    if detection.name not in registry:
        # Only while a detected family's parser is not written yet: say so rather than fail a load.
        return ParserChoice(None, f"detected '{detection.name}' ({detection.reason}), which is not a registered parser")
    return ParserChoice(detection.name, f"detected, {detection.reason}")


def choose_parsers(
    *,
    tool_parser: str | None,
    reasoning_parser: str | None,
    chat_template: str | None,
    special_tokens: frozenset[str] = frozenset(),
) -> ModelParsers:
    """The parsers for a model: each setting when given (``none``: off), else detected from the
    chat template and special tokens. Raises :class:`UnknownParserError` for an unknown name."""
    return ModelParsers(
        tool=_choose(
            tool_parser, "tool_parser", detect.detect_tool_parser(chat_template, special_tokens), TOOL_PARSERS
        ),
        reasoning=_choose(
            reasoning_parser,
            "reasoning_parser",
            detect.detect_reasoning_parser(chat_template, special_tokens),
            REASONING_PARSERS,
        ),
    )


def _registered_name(fmt: _Format, registry: Mapping[str, _Format]) -> str:
    # Aliases share a format (qwen3 is hermes3's): name it by its own name when registered so.
    names = [name for name, registered in registry.items() if registered is fmt]
    return fmt.name if fmt.name in names or not names else names[0]


def tool_parser_name(fmt: ToolCallFormat | None) -> str | None:
    """The registry name of a tool-call format in use (an alias' format is named by its own name)."""
    return None if fmt is None else _registered_name(fmt, TOOL_PARSERS)


def reasoning_parser_name(fmt: ReasoningFormat | None) -> str | None:
    return None if fmt is None else _registered_name(fmt, REASONING_PARSERS)


def format_markers(tool_format: ToolCallFormat | None, reasoning_format: ReasoningFormat | None) -> frozenset[str]:
    """The markers of these formats that tokenizers may declare special (kept in decoding)."""
    markers = set(reasoning_format.special_tokens if reasoning_format else ())
    markers.update(tool_format.special_tokens if tool_format else ())
    return frozenset(markers)
