"""``speech2text`` / ``text2speech`` (aliases ``speech_to_text`` / ``text_to_speech``): export a
Whisper model, or a SpeechT5 model with its HiFi-GAN vocoder and a voice, into an OVMS model
repository.

Takes OVMS ``export_model.py``'s argument names for those tasks (:func:`add_speech_arguments`);
:class:`SpeechOptions` is what they add to the export's steps and guarantees
(:func:`ovserve.export.driver.export`): cheap checks first (the source is a Whisper, resp. SpeechT5,
checkpoint; word timestamps need its ``alignment_heads``; a voice file holds the model's
``speaker_embedding_dim`` float32 values), conversion with optimum-intel as OVMS's script runs it
(``optimum-cli export openvino --model SRC --weight-format F --trust-remote-code``, plus
``--model-kwargs '{"vocoder": VOCODER}'`` for SpeechT5) into a staging directory, the voice copied
to ``voices/NAME.bin``, ``graph.pbtxt`` as OVMS's ``s2t_graph_template`` / ``t2s_graph_template``
render it, a check that ovserve reads the graph and that the pipeline it describes transcribes a
tone (with word timestamps when enabled) or speaks a word in every voice. Raises
:class:`~ovserve.export.report.ExportError`.

Differences from OVMS's script, on purpose: ``--model_type`` defaults to ``speecht5`` and ``kokoro``
is refused (ovserve serves SpeechT5 only); the voice file is copied into the model directory (OVMS
writes the path as given), so the repository is self-contained; ``--speaker_name`` without
``--speaker_path`` (or the reverse) is an error, not silently no voice;
``--extra_quantization_params`` and ``--ov_cache_dir`` are applied (OVMS's script drops them for
these tasks).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovserve.engine.spec import EngineSpec
from ovserve.export.arguments import (
    add_cache_dir_argument,
    add_task_parser,
    check_cache_dir,
    check_source,
    non_negative_int,
)
from ovserve.export.driver import Checkpoint, Options, Plan
from ovserve.export.report import ExportError, stage
from ovserve.export.repository import LOOPBACK_INPUT_HANDLER
from ovserve.export.source import Source, resolve_source
from ovserve.export.verification import check_runs
from ovserve.json_types import JsonObject
from ovserve.settings.schema import ModelSettings

# Subcommand (OVMS's name), its alias (ovserve's task name), what it exports.
_SUBCOMMANDS = (
    ("speech2text", "speech_to_text", "a Whisper model for /v3/audio/transcriptions"),
    ("text2speech", "text_to_speech", "a SpeechT5 model for /v3/audio/speech"),
)
SPEECH_COMMANDS = {name: task for command, task, _ in _SUBCOMMANDS for name in (command, task)}
# optimum-intel's export task, and the model type ovserve's pipeline for it serves.
OPTIMUM_TASKS = {"speech_to_text": "automatic-speech-recognition-with-past", "text_to_speech": "text-to-audio"}
MODEL_TYPES = {"speech_to_text": "whisper", "text_to_speech": "speecht5"}
_VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def add_speech_arguments(tasks: Any) -> None:
    """``speech2text`` and ``text2speech`` under the export command's subparsers ``tasks``."""
    for command, alias, what in _SUBCOMMANDS:
        parser = add_task_parser(tasks, command, what, plan_from_args, alias=alias)
        add_cache_dir_argument(parser)
        parser.add_argument(
            "--num_streams", type=non_negative_int, default=0, help="plugin_config NUM_STREAMS (0: 1, as OVMS)"
        )
        if alias == "speech_to_text":
            parser.add_argument(
                "--enable_word_timestamps",
                action="store_true",
                help="load the model for word timestamps (needs alignment_heads in its generation_config.json)",
            )
        else:
            parser.add_argument(
                "--model_type", choices=["speecht5", "kokoro"], default="speecht5", help="speecht5 (kokoro is refused)"
            )
            parser.add_argument(
                "--vocoder", help="the HiFi-GAN vocoder (Hub id or directory), e.g. microsoft/speecht5_hifigan"
            )
            parser.add_argument("--speaker_name", help="the voice's name (with --speaker_path)")
            parser.add_argument("--speaker_path", type=Path, help="the voice: raw float32 speaker embedding (.bin)")


def _voice(args: argparse.Namespace) -> tuple[str, Path] | None:
    name, path = getattr(args, "speaker_name", None), getattr(args, "speaker_path", None)
    if name is None and path is None:
        return None
    if name is None or path is None:
        raise ExportError("--speaker_name and --speaker_path go together: the voice's name and its file")
    if not _VOICE_NAME.fullmatch(name):
        raise ExportError(f"--speaker_name {name!r}: letters, digits, '_', '.' and '-' only (it names voices/NAME.bin)")
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ExportError(f"--speaker_path {path}: no such file")
    size = path.stat().st_size
    if size == 0 or size % 4:
        raise ExportError(f"--speaker_path {path}: {size} bytes is not a whole number of float32 values")
    return name, path


def voice_file(name: str) -> str:
    """Where the export puts a voice, relative to the model directory (and to its graph)."""
    return f"voices/{name}.bin"


_S2T_NODE = """  name: "S2tExecutor"
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
"""
_T2S_NODE = """  name: "T2sExecutor"
  input_side_packet: "TTS_NODE_RESOURCES:t2s_servable"
  calculator: "T2sCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
"""


@dataclass(frozen=True)
class SpeechOptions(Options):
    """A speech model's part of the plan: its checks, its vocoder and voice, its graph's options."""

    task: str  # "speech_to_text" or "text_to_speech"
    target_device: str
    num_streams: int
    cache_dir: str | None
    enable_word_timestamps: bool = False
    vocoder: str | None = None
    voice: tuple[str, Path] | None = None  # name, speaker embedding file

    def check_checkpoint(self, source: Source, config: JsonObject) -> None:
        """A Whisper (SpeechT5) checkpoint; the alignment heads word timestamps need; a voice of its size."""
        from ovserve.engine.speech import alignment_heads

        expected = MODEL_TYPES[self.task]
        if config.get("model_type") != expected:
            raise ExportError(
                f"{source.describe()} is a '{config.get('model_type')}' model; ovserve serves {self.task} with "
                f"{expected} models only"
            )
        if self.enable_word_timestamps:
            generation_config = source.fetch("generation_config.json")
            if generation_config is None or not alignment_heads(generation_config.parent):
                raise ExportError(
                    f"--enable_word_timestamps: {source.describe()} names no alignment_heads in its "
                    "generation_config.json (the cross-attention heads that align text to audio)"
                )
        dimension = config.get("speaker_embedding_dim")
        if self.voice is not None and isinstance(dimension, int) and self.voice[1].stat().st_size != dimension * 4:
            raise ExportError(
                f"--speaker_path {self.voice[1]} holds {self.voice[1].stat().st_size // 4} float32 values; "
                f"{source.describe()}'s speaker embeddings have {dimension} (speaker_embedding_dim)"
            )

    def other_checkpoints(self, target: Path) -> list[Checkpoint]:
        if self.vocoder is None:
            return []
        vocoder = resolve_source(self.vocoder)
        stage(f"vocoder: {vocoder.describe()}")
        return [(vocoder, vocoder.config())]

    def optimum_task(self, source: Source, config: JsonObject, others: list[Checkpoint]) -> str:
        return OPTIMUM_TASKS[self.task]

    def model_kwargs(self, others: list[Checkpoint]) -> dict[str, Any] | None:
        # OVMS's script: optimum-cli ... --model-kwargs '{"vocoder": VOCODER}'.
        return {"vocoder": others[0][0].model_name_or_path} if others else None

    def add_files(self, staged: Path) -> None:
        if self.voice is not None:
            name, path = self.voice
            (staged / "voices").mkdir(exist_ok=True)
            shutil.copyfile(path, staged / voice_file(name))

    def render_graph(self) -> str:
        """graph.pbtxt byte for byte as OVMS's s2t / t2s templates render it (no final newline, as
        jinja's default), plus ``CACHE_DIR`` in plugin_config when ``--ov_cache_dir`` is given."""
        plugin_config = [f'"NUM_STREAMS": "{self.num_streams or 1}"']
        if self.cache_dir:
            plugin_config.append(f'"CACHE_DIR": {json.dumps(self.cache_dir)}')
        lines = ['models_path: "./",', f"plugin_config: '{{ {', '.join(plugin_config)} }}',"]
        lines.append(f'target_device: "{self.target_device}",')
        if self.task == "speech_to_text":
            node, options, tail = _S2T_NODE, "S2tCalculatorOptions", LOOPBACK_INPUT_HANDLER
            lines.append(f"enable_word_timestamps: {'true' if self.enable_word_timestamps else 'false'},")
        else:
            node, options, tail = _T2S_NODE, "T2sCalculatorOptions", ""
            if self.voice is not None:
                name = self.voice[0]
                lines += ["voices: [", "  {", f'      name: "{name}",', f'      path: "{voice_file(name)}"', "  }", "]"]
        body = "\n".join(" " * 6 + line for line in lines)
        return (
            '# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO\ninput_stream: "HTTP_REQUEST_PAYLOAD:input"\n'
            f'output_stream: "HTTP_RESPONSE_PAYLOAD:output"\nnode {{\n{node}'
            f"  node_options: {{\n    [type.googleapis.com / mediapipe.{options}]: {{\n{body}\n    }}\n  }}{tail}\n}}"
        )

    def check(self, settings: ModelSettings, task: str, source: Source) -> None:
        """Transcribe a 1 s tone (with word timestamps when enabled), or speak a word in every voice."""
        check_runs(settings, self.task.replace("_", " "), self._run)

    def _run(self, spec: EngineSpec) -> str:
        import numpy as np

        from ovserve.engine.messages import TranscribeRequest
        from ovserve.engine.pipelines import build_pipeline
        from ovserve.engine.speech import SpeechToText, TextToSpeech

        model = build_pipeline(spec)
        if isinstance(model, SpeechToText):
            tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(16_000) / 16_000)).astype(np.float32)
            request = TranscribeRequest(
                request_id=0, audio=tone, task="transcribe", language=None, prompt=None, temperature=0.0,
                timestamps=False, words=spec.word_timestamps, max_new_tokens=8,
            )  # fmt: skip
            transcript = model.transcribe(request, on_delta=lambda _: False)
            words = f", {len(transcript.words)} timed words" if spec.word_timestamps else ""
            return f"transcribed a 1 s tone as {transcript.text[:60]!r}{words}"
        if isinstance(model, TextToSpeech):
            spoken = []
            voices: list[str | None] = [*model.voices] or [None]
            for voice in voices:
                samples, rate = model.synthesize("Hello", voice, 1.0)
                spoken.append(f"{voice or 'the default voice'} ({len(samples) / rate:.2f} s)")
            return f"spoke 'Hello' in {', '.join(spoken)}"
        raise ExportError(f"the graph describes a {spec.kind.value} model, not {self.task}")


def plan_from_args(args: argparse.Namespace) -> Plan[SpeechOptions]:
    """Defaults resolved, impossible combinations refused; nothing is written."""
    task = SPEECH_COMMANDS[args.task]
    check_cache_dir(args.ov_cache_dir)
    vocoder = None
    if task == "text_to_speech":
        if args.model_type != "speecht5":
            raise ExportError(
                f"--model_type {args.model_type}: ovserve serves SpeechT5 text-to-speech models only "
                "(openvino_genai.Text2SpeechPipeline); pass --model_type speecht5 with a SpeechT5 checkpoint"
            )
        if not args.vocoder:
            raise ExportError("--vocoder is required for a SpeechT5 model, e.g. --vocoder microsoft/speecht5_hifigan")
        check_source("--vocoder", args.vocoder)
        vocoder = args.vocoder
    options = SpeechOptions(
        task=task,
        target_device=args.target_device,
        num_streams=args.num_streams,
        cache_dir=args.ov_cache_dir,
        enable_word_timestamps=getattr(args, "enable_word_timestamps", False),
        vocoder=vocoder,
        voice=_voice(args),
    )
    return Plan.from_args(args, options)
