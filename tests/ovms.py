"""OVMS export_model.py's graph.pbtxt for other option sets: its fixed text around a given options body."""

from __future__ import annotations

from tests.e2e.test_graphs import OVMS_EXPORTED_GRAPH

_OPEN = "LLMCalculatorOptions]: {\n"
_CLOSE = "      }\n  }"


def ovms_graph(options_block: str) -> str:
    """OVMS_EXPORTED_GRAPH (what export_model.py writes) with another LLMCalculatorOptions body."""
    head, rest = OVMS_EXPORTED_GRAPH.split(_OPEN, 1)
    return head + _OPEN + options_block + rest[rest.index(_CLOSE) :]
