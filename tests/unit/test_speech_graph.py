"""OVMS speech-to-text graphs (S2tCalculatorOptions, and the older SttCalculatorOptions) load as
speech_to_text models, ``enable_word_timestamps`` included; what ovserve cannot do is refused with
the file, line and field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.engine.spec import PipelineKind
from ovserve.settings.graph import GraphError
from ovserve.settings.schema import ModelSettings, models_from_config

# OVMS's documented graph (docs/speech_to_text), its options left as written there.
S2T_GRAPH = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node {
  name: "S2tExecutor"
  input_side_packet: "STT_NODE_RESOURCES:s2t_servable"
  calculator: "S2tCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }
  node_options: {
    [type.googleapis.com / mediapipe.%(options_type)s]: {
%(options)s
    }
  }
  input_stream_handler {
    input_stream_handler: "SyncSetInputStreamHandler",
    options {
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {
        sync_set {
          tag_index: "LOOPBACK:0"
        }
      }
    }
  }
}
"""


def _config(tmp_path: Path, options: str, options_type: str = "S2tCalculatorOptions") -> Path:
    (tmp_path / "whisper").mkdir(exist_ok=True)
    (tmp_path / "whisper" / "graph.pbtxt").write_text(S2T_GRAPH % {"options_type": options_type, "options": options})
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mediapipe_config_list": [{"name": "whisper", "base_path": "whisper"}]}))
    return path


def test_s2t_graph_becomes_a_speech_to_text_model(speech_models: dict[str, Path], tmp_path: Path) -> None:
    options = (
        f'      models_path: "{speech_models["tiny-whisper"]}",\n'
        '      plugin_config: \'{ "NUM_STREAMS": "1" }\',\n'
        '      target_device: "CPU",\n'
        "      enable_word_timestamps: false,"
    )
    (model,) = models_from_config(_config(tmp_path, options))
    assert model.task == "speech_to_text" and model.pipeline_kind is PipelineKind.SPEECH_TO_TEXT
    assert model.device == "CPU" and model.plugin_config == {"NUM_STREAMS": "1"}
    assert not model.pipeline_kind.generates


def test_older_stt_graph_names_the_device_device(speech_models: dict[str, Path], tmp_path: Path) -> None:
    options = f'      models_path: "{speech_models["tiny-whisper"]}"\n      device: "CPU"'
    (model,) = models_from_config(_config(tmp_path, options, "SttCalculatorOptions"))
    assert model.pipeline_kind is PipelineKind.SPEECH_TO_TEXT and model.device == "CPU"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ('      models_path: "MODEL"\n      language: "en"', "language"),
        ('      target_device: "CPU"', "models_path"),
    ],
)
def test_speech_graph_mistakes_name_the_option(
    speech_models: dict[str, Path], tmp_path: Path, options: str, words: str
) -> None:
    config = _config(tmp_path, options.replace("MODEL", str(speech_models["tiny-whisper"])))
    with pytest.raises(GraphError) as raised:
        models_from_config(config)
    assert "graph.pbtxt" in str(raised.value) and words in str(raised.value), raised.value


def test_word_timestamps_graph_builds_the_pipeline_for_words(speech_models: dict[str, Path], tmp_path: Path) -> None:
    options = f'      models_path: "{speech_models["tiny-whisper"]}",\n      enable_word_timestamps: true,'
    (model,) = models_from_config(_config(tmp_path, options))
    assert model.enable_word_timestamps and model.engine_spec().word_timestamps


def _model_without_alignment_heads(directory: Path) -> Path:
    """Enough of a Whisper export for the settings (they check files, not weights), and no alignment_heads."""
    directory.mkdir()
    for name in ("openvino_encoder_model.xml", "openvino_decoder_model.xml", "openvino_tokenizer.xml"):
        (directory / name).write_text("")
    (directory / "generation_config.json").write_text(json.dumps({"lang_to_id": {"<|en|>": 5}}))
    return directory


def test_word_timestamps_of_a_model_without_alignment_heads_name_the_line(tmp_path: Path) -> None:
    model_dir = _model_without_alignment_heads(tmp_path / "no-heads")
    config = _config(tmp_path, f'      models_path: "{model_dir}",\n      enable_word_timestamps: true,')
    with pytest.raises(GraphError) as raised:
        models_from_config(config)
    message = str(raised.value)
    assert "graph.pbtxt:" in message and "field 'enable_word_timestamps'" in message, message
    assert "alignment_heads" in message and str(model_dir / "generation_config.json") in message


def test_word_timestamps_flag_of_another_task_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = _model_without_alignment_heads(tmp_path / "model")
    settings = ModelSettings.model_validate(
        {"model_name": "m", "model_path": model_dir, "task": "embeddings", "enable_word_timestamps": True}
    )
    assert settings.pipeline_kind is PipelineKind.EMBEDDINGS
    assert "a embeddings model ignores enable_word_timestamps" in caplog.text
