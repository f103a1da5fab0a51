"""`ovserve export speech2text|text2speech` arguments -> graph.pbtxt as OVMS's export_model.py writes it
(its s2t/t2s jinja templates, rendered), and the argument mistakes refused before anything is read
or written (no model needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ovserve.export import build_parser, main
from ovserve.export.speech import plan_from_args
from ovserve.settings.graph import parse_graph

# OVMS's s2t_graph_template rendered (jinja2, model_path "./", num_streams 0, enable_word_timestamps).
OVMS_S2T_GRAPH = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "HTTP_REQUEST_PAYLOAD:input"
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
    [type.googleapis.com / mediapipe.S2tCalculatorOptions]: {
      models_path: "./",
      plugin_config: '{ "NUM_STREAMS": "1" }',
      target_device: "CPU",
      enable_word_timestamps: true,
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
}"""
# OVMS's t2s_graph_template rendered (num_streams 2, GPU, one voice).
OVMS_T2S_GRAPH = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node {
  name: "T2sExecutor"
  input_side_packet: "TTS_NODE_RESOURCES:t2s_servable"
  calculator: "T2sCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: {
    [type.googleapis.com / mediapipe.T2sCalculatorOptions]: {
      models_path: "./",
      plugin_config: '{ "NUM_STREAMS": "2" }',
      target_device: "GPU",
      voices: [
        {
            name: "alloy",
            path: "voices/alloy.bin"
        }
      ]
    }
  }
}"""


@pytest.fixture()
def voice(tmp_path: Path) -> Path:
    path = tmp_path / "speaker.bin"
    path.write_bytes(np.zeros(512, dtype=np.float32).tobytes())
    return path


def test_speech2text_graph_is_ovms_template_byte_for_byte() -> None:
    plan = plan_from_args(build_parser().parse_args(["speech2text", "--source_model", "openai/whisper-base",
                                                     "--enable_word_timestamps"]))  # fmt: skip
    assert plan.model_dir == Path("models").resolve() / "openai" / "whisper-base"
    assert plan.options.render_graph() == OVMS_S2T_GRAPH
    assert plan.weight_format == "int8"  # OVMS's default


def test_text2speech_graph_is_ovms_template_byte_for_byte_with_the_voice_in_the_model(voice: Path) -> None:
    args = ["text2speech", "--source_model", "microsoft/speecht5_tts", "--vocoder", "microsoft/speecht5_hifigan",
            "--num_streams", "2", "--target_device", "GPU", "--speaker_name", "alloy",
            "--speaker_path", str(voice)]  # fmt: skip
    plan = plan_from_args(build_parser().parse_args(args))
    assert plan.options.render_graph() == OVMS_T2S_GRAPH
    assert plan.options.voice == ("alloy", voice) and plan.options.vocoder == "microsoft/speecht5_hifigan"


def test_written_graphs_read_back_as_ovserve_settings(tmp_path: Path, voice: Path) -> None:
    args = ["text2speech", "--source_model", "microsoft/speecht5_tts", "--vocoder", "v", "--ov_cache_dir", "/c",
            "--speaker_name", "alloy", "--speaker_path", str(voice)]  # fmt: skip
    graph = tmp_path / "graph.pbtxt"
    graph.write_text(plan_from_args(build_parser().parse_args(args)).options.render_graph())
    values = parse_graph(graph).values
    assert values["task"] == "text_to_speech"
    assert values["voices"] == {"alloy": (tmp_path / "voices" / "alloy.bin").resolve()}
    assert values["plugin_config"] == '{ "NUM_STREAMS": "1", "CACHE_DIR": "/c" }'
    graph.write_text(
        plan_from_args(build_parser().parse_args(["speech2text", "--source_model", "w"])).options.render_graph()
    )
    values = parse_graph(graph).values
    assert values["task"] == "speech_to_text" and values["enable_word_timestamps"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["text2speech", "--source_model", "m"], "--vocoder is required"),
        (["text2speech", "--source_model", "m", "--vocoder", "v", "--model_type", "kokoro"], "SpeechT5"),
        (["text2speech", "--source_model", "m", "--vocoder", "./no-such-vocoder"], "no such directory"),
        (["text2speech", "--source_model", "m", "--vocoder", "v", "--speaker_name", "a"], "go together"),
        (["text2speech", "--source_model", "m", "--vocoder", "v", "--speaker_name", "../a", "--speaker_path", "VOICE"],
         "letters, digits"),
        (["text2speech", "--source_model", "m", "--vocoder", "v", "--speaker_name", "a", "--speaker_path", "ODD"],
         "not a whole number of float32"),
        (["speech2text", "--source_model", "m", "--weight-format", "fp16",
          "--extra_quantization_params", "--sym --ratio 1.0"],
         "int8 and int4 weights"),
        (["speech2text", "--source_model", "m", "--ov_cache_dir", "/it's"], "single quote"),
    ],
)  # fmt: skip
def test_argument_mistakes_are_one_line_errors_before_any_work(
    tmp_path: Path, voice: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\0" * 513)
    repository = tmp_path / "models"
    argv = [arg.replace("VOICE", str(voice)).replace("ODD", str(odd)) for arg in args]
    assert main([*argv, "--model_repository_path", str(repository)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ovserve export: ") and message in lines[0], lines
    assert not repository.exists()


def test_a_checkpoint_of_another_kind_is_refused_before_converting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "qwen"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "qwen2"}')
    repository = tmp_path / "models"
    assert main(["speech2text", "--source_model", str(checkpoint), "--model_repository_path", str(repository)]) == 2
    assert "'qwen2' model; ovserve serves speech_to_text with whisper models only" in capsys.readouterr().err
    assert not repository.exists()


def test_word_timestamps_of_a_checkpoint_without_alignment_heads_are_refused_before_converting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "whisper"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "whisper"}')
    (checkpoint / "vocab.json").write_text("{}")
    (checkpoint / "generation_config.json").write_text('{"lang_to_id": {}}')
    repository = tmp_path / "models"
    argv = ["speech2text", "--source_model", str(checkpoint), "--model_repository_path", str(repository),
            "--enable_word_timestamps"]  # fmt: skip
    assert main(argv) == 2
    assert "names no alignment_heads" in capsys.readouterr().err
    assert not repository.exists()


def test_a_voice_of_the_wrong_size_is_refused_before_converting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "speecht5"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "speecht5", "speaker_embedding_dim": 512}')
    (checkpoint / "spm_char.model").write_bytes(b"")
    voice = tmp_path / "short.bin"
    voice.write_bytes(np.zeros(100, dtype=np.float32).tobytes())
    repository = tmp_path / "models"
    argv = ["text2speech", "--source_model", str(checkpoint), "--vocoder", "microsoft/speecht5_hifigan",
            "--speaker_name", "short", "--speaker_path", str(voice),
            "--model_repository_path", str(repository)]  # fmt: skip
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "holds 100 float32 values" in error and "have 512 (speaker_embedding_dim)" in error, error
    assert not repository.exists()
