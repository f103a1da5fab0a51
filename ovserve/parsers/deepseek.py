"""DeepSeek: V3.1 tool calls (``deepseek_v31``) and R1-style reasoning (``deepseek_r1``).

Tool calls, DeepSeek-V3.1 and V3.2-Exp, thinking or not::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json arguments}<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>

(``｜`` is the fullwidth bar U+FF5C, ``▁`` U+2581; no whitespace is required between the
markers.) Sources: the chat template of deepseek-ai/DeepSeek-V3.1 (kept as ggml-org/llama.cpp
``models/templates/deepseek-ai-DeepSeek-V3.1.jinja``) and vLLM's
``vllm/entrypoints/openai/tool_parsers/deepseekv31_tool_parser.py``. vLLM drops text after the
section; here it is content. Other DeepSeek formats are not this one: DeepSeek-V3/R1 write
``function<｜tool▁sep｜>NAME`` and a fenced JSON block, DeepSeek-V3.2 its DSML markup.

Reasoning, DeepSeek-R1 (vLLM ``vllm/reasoning/deepseek_r1_reasoning_parser.py``): the template
ends the prompt with ``<think>\\n``, so the output is reasoning from its first character up to
``</think>``; an output without ``</think>`` is all reasoning (vLLM's rule, whatever the prompt
says); an opening ``<think>`` the model writes anyway is dropped. Hybrid models whose template
closes the block for non-thinking requests (V3.1's ``</think>``) want the prompt-driven
``<think>`` splitter (reasoning parser ``qwen3``) instead.
"""

from __future__ import annotations

from typing import Any

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.reasoning import ReasoningSpan
from ovserve.parsers.schemas import SchemaRegex, ToolSchemas, regex_literal
from ovserve.parsers.segments import marked_calls

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEPARATOR = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"


def _call(name: str, arguments: JsonObject) -> ToolCall:
    if not name:
        raise PayloadError(f"no tool name before {SEPARATOR!r}")
    return ToolCall(name=name, arguments=arguments)


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    return marked_calls(payload, CALL_BEGIN, SEPARATOR, CALL_END, _call)


def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
    begin = regex_literal(f"{CALLS_BEGIN}{CALL_BEGIN}{name}{SEPARATOR}")
    return f"{begin}({schema_regex(parameters)}){regex_literal(CALL_END + CALLS_END)}"


TOOL_FORMAT = ToolCallFormat(
    name="deepseek_v31",
    starts=(CALLS_BEGIN,),
    end=CALLS_END,
    decode=decode,
    call_regex=call_regex,
    special_tokens=(CALLS_BEGIN, CALLS_END, CALL_BEGIN, SEPARATOR, CALL_END),
)

THINK_START = "<think>"
THINK_END = "</think>"

REASONING_FORMAT = ReasoningFormat(
    name="deepseek_r1",
    start=THINK_START,
    end=THINK_END,
    special_tokens=(THINK_START, THINK_END),
    stream_parser=ReasoningSpan(starts=(THINK_START,), ends=(THINK_END,), opened=True).parser,
)
