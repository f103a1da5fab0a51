"""A format's forced-call regex (``call_regex``) compiled as the server compiles it for
``tool_choice`` required / named, to check that what it admits is what the parser reads."""

from __future__ import annotations

import functools
import re
from typing import Any

from ovserve.core.guided import schema_regex
from ovserve.parsers.base import ToolCallFormat

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "units": {"enum": ["c", "f"]},
    },
    "required": ["city"],
}


def call_pattern(fmt: ToolCallFormat, name: str, parameters: Any = WEATHER) -> re.Pattern[str]:
    assert fmt.call_regex is not None, f"{fmt.name} has no call_regex"
    regex = fmt.call_regex(name, parameters, functools.partial(schema_regex, param="tools[0].function.parameters"))
    return re.compile(regex)
