"""Every pipeline kind's build path applies the kernel-cache bounds (ovserve.engine.memory): the
constructors are replaced by recorders of the properties they are given, so no model is needed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import openvino_genai as ov_genai
import pytest

from ovserve.engine import images, pipelines, speech
from ovserve.engine.memory import CPU_RUNTIME_CACHE_CAPACITY, DEFAULT_CPU_RUNTIME_CACHE_CAPACITY, PRIMITIVE_CACHE_ENV
from ovserve.engine.spec import EngineSpec, PipelineKind, SchedulerSettings
from ovserve.json_types import JsonObject


class Built:
    """What a replaced constructor was given."""

    def __init__(self, kind: str, properties: dict[str, Any]) -> None:
        self.kind = kind
        self.properties = properties


@pytest.fixture()
def recorders(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PRIMITIVE_CACHE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(speech, "SpeechToText", lambda spec: Built("whisper", dict(spec.plugin_config)))
    monkeypatch.setattr(speech, "TextToSpeech", lambda spec: Built("speecht5", dict(spec.plugin_config)))
    monkeypatch.setattr(pipelines, "build_retrieval_model", lambda spec: Built("retrieval", dict(spec.plugin_config)))
    monkeypatch.setattr(images, "ImageGenerator", lambda spec: Built("image", dict(spec.plugin_config)))
    monkeypatch.setattr(ov_genai, "LLMPipeline", lambda path, device, **props: Built("stateful", props))
    monkeypatch.setattr(
        ov_genai, "ContinuousBatchingPipeline", lambda path, scheduler, device, props: Built("cb", dict(props))
    )
    monkeypatch.setattr(ov_genai, "draft_model", lambda path, device, **props: Built("draft", props))


@pytest.mark.parametrize("kind", list(PipelineKind))
def test_every_kind_is_built_with_both_bounds(kind: PipelineKind, recorders: None) -> None:
    draft = {"draft_models_path": Path("draft"), "draft_scheduler": SchedulerSettings()}
    spec = EngineSpec(
        name="m",
        model_path=Path("model"),
        kind=kind,
        plugin_config={"PERFORMANCE_HINT": "LATENCY"},
        **(draft if kind is PipelineKind.SPECULATIVE else {}),  # type: ignore[arg-type]
    )
    built = pipelines._build_pipeline(spec)
    assert isinstance(built, Built)
    assert built.properties[CPU_RUNTIME_CACHE_CAPACITY] == DEFAULT_CPU_RUNTIME_CACHE_CAPACITY
    assert built.properties["PERFORMANCE_HINT"] == "LATENCY"
    assert PRIMITIVE_CACHE_ENV[0] in os.environ
    if kind is PipelineKind.SPECULATIVE:
        assert built.properties["draft_model"].properties[CPU_RUNTIME_CACHE_CAPACITY] == 0
    # The spec the caller holds is not modified.
    assert spec.plugin_config == {"PERFORMANCE_HINT": "LATENCY"}


def test_an_operators_runtime_cache_capacity_wins_for_retrieval_too(recorders: None) -> None:
    chosen: JsonObject = {CPU_RUNTIME_CACHE_CAPACITY: 500}
    spec = EngineSpec(name="e", model_path=Path("model"), kind=PipelineKind.EMBEDDINGS, plugin_config=chosen)
    built = pipelines._build_pipeline(spec)
    assert built.properties[CPU_RUNTIME_CACHE_CAPACITY] == 500


def test_other_devices_are_left_alone(recorders: None) -> None:
    spec = EngineSpec(name="e", model_path=Path("model"), device="GPU", kind=PipelineKind.RERANK)
    assert pipelines._build_pipeline(spec).properties == {}
