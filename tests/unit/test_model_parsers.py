"""A served model's parsers are chosen when it loads, and the choice is logged once, with why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ovserve.dialects.openai.models import ModelObject
from ovserve.models.served import ServedModel
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from ovserve.settings.schema import ModelSettings, ServerSettings

# A loaded model's residency, as the manager would describe it (not what this test is about).
LOADED = {
    "state": "loaded",
    "pinned": False,
    "lazy_load": False,
    "idle_unload_timeout": None,
    "memory_bytes": None,
    "memory_estimate_bytes": None,
    "last_used": None,
    "load_stage": None,
    "load_stage_seconds": None,
}


def parsers_of(model: ServedModel) -> dict[str, object]:
    info = ModelObject.of(model, lambda _: dict(LOADED)).ovserve.model_dump()
    return {key: info[key] for key in ("tool_parser", "reasoning_parser")}


def load(tiny_llm: Path, caplog: pytest.LogCaptureFixture, **parsers: str) -> tuple[ServedModel, list[str]]:
    settings = ModelSettings.model_validate({"name": "m", "path": tiny_llm, **parsers})
    with caplog.at_level(logging.INFO, logger="ovserve.models.served"):
        model = ServedModel.load(settings, ServerSettings(models=[settings]))
    lines = [record.getMessage() for record in caplog.records if record.name == "ovserve.models.served"]
    return model, [line for line in lines if "parser" in line]


def test_parsers_are_detected_from_the_template_and_logged_once_with_the_reason(
    tiny_llm: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, lines = load(tiny_llm, caplog)  # tiny-llm has Qwen2.5's template: Hermes calls, no thinking
    assert model.tool_format is TOOL_PARSERS["hermes3"]
    assert model.reasoning_format is None
    assert parsers_of(model) == {"tool_parser": "hermes3", "reasoning_parser": None}
    assert lines == [
        "model 'm': tool parser hermes3 (detected, Hermes / Qwen: the chat template writes JSON calls inside "
        "<tool_call>); no reasoning parser (nothing in the chat template names a reasoning format)"
    ]


def test_settings_win_and_none_turns_parsing_off(tiny_llm: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, lines = load(tiny_llm, caplog, tool_parser="none", reasoning_parser="qwen3")
    assert model.tool_format is None
    assert model.reasoning_format is REASONING_PARSERS["qwen3"]
    # /v3/models names what was chosen, an alias included.
    model, _ = load(tiny_llm, caplog, tool_parser="qwen3")
    assert parsers_of(model) == {"tool_parser": "qwen3", "reasoning_parser": None}
    assert lines == ["model 'm': no tool parser (tool_parser: none); reasoning parser qwen3 (reasoning_parser setting)"]
