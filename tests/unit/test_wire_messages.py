"""The engine wire protocol: every message crosses a real pipe intact; the test fault comes from one place."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from ovserve.config import ModelSettings
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    EngineErrorKind,
    EngineStats,
    Fatal,
    Ready,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
    VisionPrompt,
)
from ovserve.engine.spec import FAULT_ENV, EngineFault
from ovserve.generation_config import GenerationParams

PARAMS = GenerationParams(
    max_new_tokens=4, temperature=0.5, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
    presence_penalty=0.0, frequency_penalty=0.0, length_penalty=1.0, ignore_eos=False, seed=7, stop=("x",),
    stop_token_ids=(2,), include_stop=False, n=1, best_of=1, logprobs=True, skip_special_tokens=True,
    num_assistant_tokens=None, assistant_confidence_threshold=None, max_ngram_size=None, beam_search=False,
    structured_output={"regex": "[a-z]+"},
)  # fmt: skip


def test_commands_and_event_batches_cross_a_pipe_unchanged() -> None:
    server_end, engine_end = multiprocessing.Pipe()
    commands = [AddRequest(1, [5, 6, 7], PARAMS), CancelRequest(1), StatsRequest(9), Shutdown()]
    for command in commands:
        server_end.send(command)
    assert [engine_end.recv() for _ in commands] == commands

    events = [
        Ready(123),
        Fatal("no such model"),
        SequenceOutput(1, 0, "hé", 2, [(104, "h", -0.1), (233, "é", -0.2)], None),
        SequenceOutput(1, 1, "", 0, None, "length"),
        RequestEnded(1),
        RequestEnded(2, EngineErrorKind.IGNORED, "no room"),
        StatsReply(9, EngineStats(1, 2, 3, 4, 0.5)),
    ]
    engine_end.send(events)  # one write per engine step
    assert server_end.recv() == events


def test_a_vision_prompt_crosses_with_its_image_bytes() -> None:
    server_end, engine_end = multiprocessing.Pipe()
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    server_end.send(AddRequest(1, VisionPrompt("<ov_genai_image_0> what?", [image]), PARAMS))
    received = engine_end.recv()
    assert isinstance(received.prompt, VisionPrompt)
    assert received.prompt.text == "<ov_genai_image_0> what?"
    np.testing.assert_array_equal(received.prompt.images[0], image)


def test_the_step_fault_is_off_unless_its_variable_is_set() -> None:
    assert EngineFault.from_environment({}) is None
    assert EngineFault.from_environment({FAULT_ENV: "0"}) is None
    assert EngineFault.from_environment({FAULT_ENV: "777"}) == EngineFault(fail_step_on_max_new_tokens=777)


def test_the_engine_spec_carries_the_fault_the_server_environment_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ModelSettings.model_construct(name="m", path=Path("/models/m"))
    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert settings.engine_spec().fault is None
    monkeypatch.setenv(FAULT_ENV, "777")
    assert settings.engine_spec().fault == EngineFault(fail_step_on_max_new_tokens=777)
