"""OVMS speech-to-text graphs (S2tCalculatorOptions, and the older SttCalculatorOptions) load as
speech_to_text models; what ovserve cannot do is refused with the file, line and field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.engine.spec import PipelineKind
from ovserve.settings.graph import GraphError
from ovserve.settings.schema import models_from_config

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
        ('      models_path: "MODEL"\n      enable_word_timestamps: true', "enable_word_timestamps"),
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
