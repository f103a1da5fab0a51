"""Export, then serve, for the speech tasks: a tiny Whisper checkpoint through ``ovserve export speech2text
--enable_word_timestamps`` (int8, OVMS's default) and a tiny SpeechT5 checkpoint with its HiFi-GAN
vocoder and a voice through ``scripts/export_model.py text2speech``, into one repository that
``ovserve serve --config_path`` then serves (real optimum-intel, nncf and openvino_genai in
subprocesses, offline: the checkpoints are the demo builders' Hugging Face directories)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from ovserve.core.audio import decode_audio
from ovserve.settings.graph import parse_graph
from tests.audio_files import make_audio
from tests.conftest import ROOT, Server, start_config_server


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scripts.demo_models.speech import TINY_SPEECHT5_SPEC, TINY_WHISPER_SPEC
    from scripts.demo_models.speech_tokenizers import build_char_sentencepiece, build_whisper_tokenizer

    root = tmp_path_factory.mktemp("speech-export")
    whisper = TINY_WHISPER_SPEC.checkpoint(build_whisper_tokenizer(root / "whisper-tokenizer"), root / "hf-whisper")
    speecht5 = TINY_SPEECHT5_SPEC.checkpoint(build_char_sentencepiece(root / "speecht5-tokenizer"), root / "hf-t5")
    voice = root / "narrator.bin"
    voice.write_bytes(np.random.default_rng(7).normal(0.0, 0.1, 512).astype(np.float32).tobytes())
    repo = root / "repo"
    commands = [
        [sys.executable, "-m", "ovserve", "export", "speech2text", "--source_model", str(whisper),
         "--model_name", "whisper", "--enable_word_timestamps"],
        [sys.executable, "scripts/export_model.py", "text2speech", "--source_model", str(speecht5),
         "--vocoder", str(speecht5 / "vocoder"), "--model_name", "tts", "--weight-format", "fp16",
         "--speaker_name", "narrator", "--speaker_path", str(voice)],
    ]  # fmt: skip
    for command in commands:
        result = subprocess.run(
            [*command, "--model_repository_path", str(repo)],
            cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "[export] check:" in result.stdout, result.stdout
    return repo


@pytest.fixture(scope="module")
def exported_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_config_server(tmp_path_factory.mktemp("served"), repository / "config.json", model_name="whisper")
    yield server
    server.stop()


def test_export_writes_ovms_speech_graphs_the_voice_and_config_entries(repository: Path) -> None:
    config = json.loads((repository / "config.json").read_text())
    assert config["mediapipe_config_list"] == [
        {"name": "whisper", "base_path": "whisper"},
        {"name": "tts", "base_path": "tts"},
    ]
    whisper = parse_graph(repository / "whisper" / "graph.pbtxt").values
    assert whisper["task"] == "speech_to_text" and whisper["enable_word_timestamps"] is True
    assert "alignment_heads" in json.loads((repository / "whisper" / "generation_config.json").read_text())
    tts = parse_graph(repository / "tts" / "graph.pbtxt").values
    voice = (repository / "tts" / "voices" / "narrator.bin").resolve()
    assert tts["task"] == "text_to_speech" and tts["voices"] == {"narrator": voice}
    assert voice.stat().st_size == 512 * 4
    assert (repository / "tts" / "openvino_vocoder.xml").is_file()


def test_exported_models_serve_word_timestamps_and_speech(exported_server: Server) -> None:
    upload = ("tone.wav", make_audio("wav", 16_000, 1, 2.0))
    transcript = exported_server.client().audio.transcriptions.create(
        model="whisper", file=upload, response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert transcript.words and all(0.0 <= word.start <= word.end <= 2.0 for word in transcript.words)
    speech = httpx.post(
        f"{exported_server.url}/v3/audio/speech",
        json={"model": "tts", "input": "Hello there.", "voice": "narrator", "response_format": "wav"},
        timeout=120,
    )
    assert speech.status_code == 200, speech.text
    decoded = decode_audio(speech.content, max_seconds=60)
    assert decoded.seconds > 0 and decoded.container == "wav"
