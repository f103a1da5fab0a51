"""IBM Granite 3.x: tool calls (``granite``) and Granite 3.2 thinking (reasoning ``granite``).

Tool calls: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``, the JSON list running to
the end of the output. Granite 3.0 writes the special token ``<|tool_call|>``, Granite 3.1 may
write the text ``<tool_call>`` instead. Source: vLLM
``vllm/entrypoints/openai/tool_parsers/granite_tool_parser.py``, which strips either marker and
then takes a leading bare list too, because it decodes with special tokens skipped and so loses
``<|tool_call|>``; ovserve keeps the marker (``special_tokens``) and needs no bare-list rule.
``<|tool_call|>`` counts anywhere (text before it is content); the text ``<tool_call>`` only at the
start of the output, as vLLM reads it. Granite 4 writes Hermes calls
(``<tool_call>{...}</tool_call>``, its chat template says so) and vLLM serves it with the hermes
parser: use ``hermes3`` for Granite 4.

Reasoning: Granite 3.2 with ``thinking`` writes "Here is my thought process:" ... "Here is my
response:" ...; vLLM ``vllm/reasoning/granite_reasoning_parser.py`` also accepts "Here's" for
either phrase (seen from quantized models), and so does this parser. The thought process must
open the output; output that never writes the response phrase is all reasoning (vLLM streams it
so too).
"""

from __future__ import annotations

from ovserve.parsers.base import ReasoningFormat, ToolCallFormat
from ovserve.parsers.calls import call_list
from ovserve.parsers.reasoning import ReasoningSpan
from ovserve.parsers.schemas import json_object_call

TOOL_CALL = "<|tool_call|>"
TOOL_CALL_TEXT = "<tool_call>"


TOOL_FORMAT = ToolCallFormat(
    name="granite",
    starts=(TOOL_CALL,),
    end=None,
    decode=call_list,
    start_of_output_only=(TOOL_CALL_TEXT,),
    call_regex=json_object_call(f"{TOOL_CALL}[", "]"),
    special_tokens=(TOOL_CALL,),
)

THOUGHTS = ("Here is my thought process:", "Here's my thought process:")
RESPONSE = ("Here is my response:", "Here's my response:")

REASONING_FORMAT = ReasoningFormat(
    name="granite",
    start=THOUGHTS[0],
    end=RESPONSE[0],
    stream_parser=ReasoningSpan(starts=THOUGHTS, ends=RESPONSE).parser,
)
