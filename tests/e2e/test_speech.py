"""Text to speech end to end: tiny-speecht5 served by Text2SpeechPipeline, called with the real ``openai``
SDK. The random model's sound means nothing; the files must be valid audio of each format (decoded
back with PyAV), voices must be the model's, and every mistake a 400 naming its field."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from ovserve.core.audio import decode_audio
from tests.audio_files import hostile_audio
from tests.conftest import Server, start_config_server

MODEL = "tiny-speecht5"


@pytest.fixture()
def client(tts_server: Server) -> openai.OpenAI:
    return tts_server.client()


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_response_format_is_audio(client: openai.OpenAI, response_format: str) -> None:
    speech = client.audio.speech.create(
        model=MODEL,
        voice="alloy",
        input="Hello from ovserve.",
        response_format=response_format,  # type: ignore[arg-type]
    )
    data = speech.content
    assert data
    if response_format == "pcm":
        # OpenAI's rate, resampled from the model's 16 kHz: 1.5 samples out per sample in.
        assert len(data) % 2 == 0 and speech.response.headers["x-sample-rate"] == "24000"
        wav = client.audio.speech.create(model=MODEL, voice="alloy", input="Hello from ovserve.", response_format="wav")
        assert wav.response.headers["x-sample-rate"] == "16000"
        assert abs(len(data) / 2 - decode_audio(wav.content, 60).seconds * 24_000) <= 24_000 * 0.01
    elif response_format != "aac":  # ADTS is not among the upload formats
        assert decode_audio(data, 60).seconds > 0


def test_voices_change_the_speech_and_unknown_ones_are_refused(client: openai.OpenAI) -> None:
    def samples(voice: str) -> np.ndarray:
        data = client.audio.speech.create(model=MODEL, voice=voice, input="same words", response_format="pcm").content
        return np.frombuffer(data, dtype="<i2")

    assert not np.array_equal(samples("alloy"), samples("echo"))
    assert np.array_equal(samples("alloy"), samples("alloy"))  # no sampling: the same voice, the same audio
    with pytest.raises(openai.BadRequestError) as raised:
        client.audio.speech.create(model=MODEL, voice="nova", input="hi")
    assert raised.value.body["param"] == "voice" and "alloy, echo" in raised.value.body["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": "x" * 4097}, "input"),
        ({"speed": 10}, "speed"),
        ({"response_format": "ogg"}, "response_format"),
        ({"stream_format": "sse"}, "stream_format"),
        ({"instructions": "whisper it"}, "instructions"),
        ({"voice": 7}, "voice"),
    ],
)
def test_speech_mistakes_are_400s_naming_the_field(tts_server: Server, body: dict[str, object], param: str) -> None:
    payload = {"model": MODEL, "input": "hi", "voice": "alloy", **body}
    response = httpx.post(f"{tts_server.url}/v1/audio/speech", json=payload, timeout=30)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param, response.text


def test_transcription_sent_to_a_speech_model_is_refused(tts_server: Server) -> None:
    data, _ = next(iter(hostile_audio(10).values()))
    response = httpx.post(
        f"{tts_server.url}/v1/audio/transcriptions", data={"model": MODEL}, files={"file": ("a.wav", data or b"x")}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "wrong_model_task"


def test_ovms_graphs_serve_both_speech_models(speech_models: dict[str, Path], tmp_path: Path) -> None:
    """OVMS's S2T and T2S graphs (voices as a graph option) in one config.json."""
    voice = speech_models[MODEL] / "voices" / "echo.bin"
    s2t = f'models_path: "{speech_models["tiny-whisper"]}" target_device: "CPU"'
    t2s = f'models_path: "{speech_models[MODEL]}" voices: [{{ name: "narrator", path: "{voice}" }}]'
    graphs = {
        "whisper": f"[type.googleapis.com / mediapipe.S2tCalculatorOptions]: {{ {s2t} }}",
        "speaker": f"[type.googleapis.com / mediapipe.T2sCalculatorOptions]: {{ {t2s} }}",
    }
    for name, options in graphs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "graph.pbtxt").write_text(
            f'input_stream: "HTTP_REQUEST_PAYLOAD:input"\nnode {{ calculator: "X" node_options: {{ {options} }} }}\n'
        )
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": n, "base_path": n} for n in graphs]}))
    server = start_config_server(tmp_path, config, model_name="whisper")
    try:
        client = server.client()
        speech = client.audio.speech.create(model="speaker", voice="narrator", input="hi", response_format="wav")
        text = client.audio.transcriptions.create(model="whisper", file=("speech.wav", speech.content))
        assert isinstance(text.text, str)
        with pytest.raises(openai.BadRequestError, match="narrator"):
            client.audio.speech.create(model="speaker", voice="alloy", input="hi")
    finally:
        server.stop()
