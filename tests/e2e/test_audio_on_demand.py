"""Audio models on demand with real engine processes (issue 33): the audio routes take their model
through the same admission and lease as chat, so a lazy model loads on its first transcription,
translation or speech request, a model in steady use is never unloaded for idleness, an evicted
one loads again on its next request, and /metrics counts audio seconds and real-time factors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.audio_files import make_audio
from tests.conftest import Server, launch_server
from tests.deploy.test_monitoring import AUDIO_METRICS, dashboard_exprs, metric_names

WHISPER, SPEAKER = "tiny-whisper", "tiny-speecht5"


def audio_config(tmp_path: Path, speech_models: dict[str, Path]) -> Path:
    """OVMS's S2T and T2S graphs for the two demo speech models, in one config.json."""
    calculators = {WHISPER: "S2tCalculatorOptions", SPEAKER: "T2sCalculatorOptions"}
    graphs = {
        name: f'[type.googleapis.com / mediapipe.{options}]: {{ models_path: "{speech_models[name]}" }}'
        for name, options in calculators.items()
    }
    for name, options in graphs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "graph.pbtxt").write_text(f'node {{ calculator: "X" node_options: {{ {options} }} }}\n')
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": name, "base_path": name} for name in graphs]}))
    return config


@pytest.fixture(scope="module")
def tone() -> bytes:
    return make_audio("wav", seconds=1.0)


def transcribe(server: Server, tone: bytes, task: str = "transcriptions") -> httpx.Response:
    return httpx.post(
        f"{server.url}/v3/audio/{task}",
        data={"model": WHISPER},
        files={"file": ("tone.wav", tone, "audio/wav")},
        timeout=300,
    )


def speak(server: Server, text: str = "hello world") -> httpx.Response:
    return httpx.post(f"{server.url}/v3/audio/speech", json={"model": SPEAKER, "input": text}, timeout=300)


def states(server: Server) -> dict[str, str]:
    data = httpx.get(f"{server.url}/v3/models", timeout=10).json()["data"]
    return {model["id"]: model["ovserve"]["state"] for model in data}


@pytest.fixture(scope="module")
def lazy_server(speech_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp("lazy-audio")
    config = audio_config(tmp_path, speech_models)
    server = launch_server(tmp_path, ["--config_path", str(config), "--lazy_load", "true"], model_name=WHISPER)
    yield server
    server.stop()


def test_lazy_audio_models_load_on_their_first_request(lazy_server: Server, tone: bytes) -> None:
    assert states(lazy_server) == {WHISPER: "unloaded", SPEAKER: "unloaded"}
    response = transcribe(lazy_server, tone)
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["text"], str)
    assert states(lazy_server)[WHISPER] == "loaded"
    assert transcribe(lazy_server, tone, "translations").status_code == 200
    speech = speak(lazy_server)
    assert speech.status_code == 200, speech.text
    assert speech.content and states(lazy_server)[SPEAKER] == "loaded"


def test_audio_metrics_count_seconds_and_real_time_factor(lazy_server: Server, tone: bytes) -> None:
    assert transcribe(lazy_server, tone).status_code == 200
    assert speak(lazy_server, "metrics count this").status_code == 200
    metrics = lazy_server.samples()
    transcribed = metrics[("ovserve_audio_input_seconds_total", (("model", WHISPER), ("operation", "transcribe")))]
    assert transcribed >= 1.0  # at least this test's one-second tone
    assert metrics[("ovserve_speech_input_characters_total", (("model", SPEAKER),))] >= len("metrics count this")
    assert metrics[("ovserve_speech_output_seconds_total", (("model", SPEAKER),))] > 0
    dashboard = {name for expr in dashboard_exprs() for name in metric_names(expr)}
    assert dashboard >= AUDIO_METRICS  # the Audio row reads them
    assert {name for name, _ in metrics} >= AUDIO_METRICS
    for model, operation in ((WHISPER, "transcribe"), (SPEAKER, "speech")):
        labels = (("model", model), ("operation", operation))
        assert metrics[("ovserve_audio_real_time_factor_count", labels)] >= 1
        assert metrics[("ovserve_audio_real_time_factor_sum", labels)] > 0


def test_an_audio_model_in_steady_use_is_never_unloaded_for_idleness(
    speech_models: dict[str, Path], tmp_path: Path, tone: bytes
) -> None:
    config = audio_config(tmp_path, speech_models)
    server = launch_server(tmp_path, ["--config_path", str(config), "--idle_unload_timeout", "4"], model_name=WHISPER)
    try:
        statuses: list[int] = []
        until = time.monotonic() + 20
        while time.monotonic() < until:
            statuses.append(transcribe(server, tone).status_code)
            time.sleep(0.3)
        assert statuses and set(statuses) == {200}, statuses
        unloads = server.samples()[("ovserve_model_unloads_total", (("model", WHISPER), ("reason", "idle")))]
        assert unloads == 0
    finally:
        server.stop()


def test_an_evicted_audio_model_loads_again_on_its_next_request(
    lazy_server: Server, speech_models: dict[str, Path], tmp_path: Path, tone: bytes
) -> None:
    # Both models' measured peaks (the lazy server ran each): a budget with room for the larger
    # one and half the smaller holds one engine at a time, so each request to the other evicts it.
    assert transcribe(lazy_server, tone).status_code == 200 and speak(lazy_server).status_code == 200
    data = httpx.get(f"{lazy_server.url}/v3/models", timeout=10).json()["data"]
    peaks = sorted(model["ovserve"]["memory_estimate_bytes"] for model in data)
    budget = peaks[1] + peaks[0] // 2
    config = audio_config(tmp_path, speech_models)
    server = launch_server(
        tmp_path, ["--config_path", str(config), "--lazy_load", "true", "--models_memory_budget", str(budget)],
        model_name=WHISPER,
    )  # fmt: skip
    try:
        for _ in range(2):
            response = transcribe(server, tone)
            assert response.status_code == 200, response.text
            response = speak(server)
            assert response.status_code == 200, response.text
        evictions = server.samples()[("ovserve_model_unloads_total", (("model", WHISPER), ("reason", "evicted")))]
        assert evictions >= 1  # the budget did evict it, and the request after reloaded it
    finally:
        server.stop()
