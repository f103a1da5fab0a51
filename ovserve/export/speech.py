"""``speech2text`` / ``text2speech`` (aliases ``speech_to_text`` / ``text_to_speech``): export a Whisper
model, or a SpeechT5 model with its HiFi-GAN vocoder and a voice, into an OVMS model repository.

Takes OVMS ``export_model.py``'s argument names for those tasks (:func:`add_speech_arguments`) and
runs the text-generation export's steps and guarantees (:mod:`ovserve.export`): cheap checks first
(the source is a Whisper, resp. SpeechT5, checkpoint; word timestamps need its ``alignment_heads``;
a voice file holds the model's ``speaker_embedding_dim`` float32 values), conversion with
optimum-intel as OVMS's script runs it (``optimum-cli export openvino --model SRC --weight-format F
--trust-remote-code``, plus ``--model-kwargs '{"vocoder": VOCODER}'`` for SpeechT5) into a staging
directory, the voice copied to ``voices/NAME.bin``, ``graph.pbtxt`` as OVMS's ``s2t_graph_template``
/ ``t2s_graph_template`` render it, a check that ovserve reads the graph and that the pipeline it
describes transcribes a tone (with word timestamps when enabled) or speaks a word in every voice,
then the swap into place and the ``config.json`` entry. A failure at any step leaves the repository
as it was. Raises :class:`~ovserve.export.report.ExportError`.

Differences from OVMS's script, on purpose: ``--model_type`` defaults to ``speecht5`` and ``kokoro`` is
refused (ovserve serves SpeechT5 only); the voice file is copied into the model directory (OVMS writes
the path as given), so the repository is self-contained; ``--speaker_name`` without
``--speaker_path`` (or the reverse) is an error, not silently no voice; ``--extra_quantization_params``
and ``--ov_cache_dir`` are applied (OVMS's script drops them for these tasks).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ovserve.export.arguments import (
    WEIGHT_FORMATS,
    _check_model_name,
    _check_source,
    _default_name,
    _non_negative_int,
    parse_compression_options,
)
from ovserve.export.report import ExportError, load_failure, stage

# Subcommand -> ovserve task; OVMS's names first, ovserve's task names second.
SPEECH_COMMANDS = {
    "speech2text": "speech_to_text",
    "speech_to_text": "speech_to_text",
    "text2speech": "text_to_speech",
    "text_to_speech": "text_to_speech",
}
# optimum-intel's export task, and the model type ovserve's pipeline for it serves.
OPTIMUM_TASKS = {"speech_to_text": "automatic-speech-recognition-with-past", "text_to_speech": "text-to-audio"}
MODEL_TYPES = {"speech_to_text": "whisper", "text_to_speech": "speecht5"}
_VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SUBCOMMANDS = (
    ("speech2text", "speech_to_text", "a Whisper model for /v3/audio/transcriptions"),
    ("text2speech", "text_to_speech", "a SpeechT5 model for /v3/audio/speech"),
)


def add_speech_arguments(tasks: Any) -> None:
    """``speech2text`` and ``text2speech`` under the export command's subparsers ``tasks``."""
    for command, alias, what in _SUBCOMMANDS:
        parser = tasks.add_parser(
            command,
            aliases=[alias],
            help=f"export {what}",
            description=f"Export {what} to OpenVINO IR and add it to an OVMS model repository.",
        )
        parser.add_argument("--source_model", required=True, help="Hugging Face model id, or a local checkpoint")
        parser.add_argument("--model_name", help="name clients send as 'model' (default: the id or directory name)")
        parser.add_argument("--model_repository_path", type=Path, default=Path("models"), help="repository root")
        parser.add_argument("--config_file_path", type=Path, help="config.json (default: MODEL_REPOSITORY/config.json)")
        parser.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS, default="int8")
        parser.add_argument("--target_device", default="CPU", help="CPU, GPU or NPU")
        parser.add_argument("--extra_quantization_params", help="optimum-cli compression options (int8/int4 only)")
        parser.add_argument("--ov_cache_dir", help="OpenVINO compilation cache directory (plugin_config CACHE_DIR)")
        parser.add_argument(
            "--num_streams", type=_non_negative_int, default=0, help="plugin_config NUM_STREAMS (0: 1, as OVMS)"
        )
        parser.add_argument("--overwrite_models", action="store_true", help="replace an existing model directory")
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


@dataclass(frozen=True)
class SpeechPlan:
    task: str  # "speech_to_text" or "text_to_speech"
    source: str
    model_name: str
    repository: Path
    config_path: Path
    weight_format: str
    quantization_params: list[str]
    target_device: str
    num_streams: int
    cache_dir: str | None
    overwrite: bool
    enable_word_timestamps: bool = False
    vocoder: str | None = None
    voice: tuple[str, Path] | None = None  # name, speaker embedding file

    @property
    def model_dir(self) -> Path:
        return self.repository / self.model_name


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


def plan_from_args(args: argparse.Namespace) -> SpeechPlan:
    """Defaults resolved, impossible combinations refused; nothing is written."""
    task = SPEECH_COMMANDS[args.task]
    _check_source("--source_model", args.source_model)
    extra = args.extra_quantization_params
    if extra and args.weight_format not in {"int8", "int4"}:
        raise ExportError(f"--extra_quantization_params apply to int8 and int4 weights, not {args.weight_format}")
    params = shlex.split(extra) if extra else []
    parse_compression_options(args.weight_format, params)
    if args.ov_cache_dir and "'" in args.ov_cache_dir:
        raise ExportError("--ov_cache_dir may not contain a single quote (graph.pbtxt quotes plugin_config with ')")
    vocoder = None
    if task == "text_to_speech":
        if args.model_type != "speecht5":
            raise ExportError(
                f"--model_type {args.model_type}: ovserve serves SpeechT5 text-to-speech models only "
                "(openvino_genai.Text2SpeechPipeline); pass --model_type speecht5 with a SpeechT5 checkpoint"
            )
        if not args.vocoder:
            raise ExportError("--vocoder is required for a SpeechT5 model, e.g. --vocoder microsoft/speecht5_hifigan")
        _check_source("--vocoder", args.vocoder)
        vocoder = args.vocoder
    repository = args.model_repository_path.expanduser().resolve()
    return SpeechPlan(
        task=task,
        source=args.source_model,
        model_name=_check_model_name(args.model_name or _default_name(args.source_model)),
        repository=repository,
        config_path=(args.config_file_path or repository / "config.json").expanduser().resolve(),
        weight_format=args.weight_format,
        quantization_params=params,
        target_device=args.target_device,
        num_streams=args.num_streams,
        cache_dir=args.ov_cache_dir,
        overwrite=args.overwrite_models,
        enable_word_timestamps=getattr(args, "enable_word_timestamps", False),
        vocoder=vocoder,
        voice=_voice(args),
    )


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
_S2T_TAIL = """
  input_stream_handler {
    input_stream_handler: "SyncSetInputStreamHandler",
    options {
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {
        sync_set {
          tag_index: "LOOPBACK:0"
        }
      }
    }
  }"""
_T2S_NODE = """  name: "T2sExecutor"
  input_side_packet: "TTS_NODE_RESOURCES:t2s_servable"
  calculator: "T2sCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
"""


def render_graph(plan: SpeechPlan) -> str:
    """graph.pbtxt byte for byte as OVMS's s2t / t2s templates render it (no final newline, as jinja's
    default), plus ``CACHE_DIR`` in plugin_config when ``--ov_cache_dir`` is given."""
    plugin_config = [f'"NUM_STREAMS": "{plan.num_streams or 1}"']
    if plan.cache_dir:
        plugin_config.append(f'"CACHE_DIR": {json.dumps(plan.cache_dir)}')
    lines = ['models_path: "./",', f"plugin_config: '{{ {', '.join(plugin_config)} }}',"]
    lines.append(f'target_device: "{plan.target_device}",')
    if plan.task == "speech_to_text":
        node, options, tail = _S2T_NODE, "S2tCalculatorOptions", _S2T_TAIL
        lines.append(f"enable_word_timestamps: {'true' if plan.enable_word_timestamps else 'false'},")
    else:
        node, options, tail = _T2S_NODE, "T2sCalculatorOptions", ""
        if plan.voice is not None:
            name = plan.voice[0]
            lines += ["voices: [", "  {", f'      name: "{name}",', f'      path: "{voice_file(name)}"', "  }", "]"]
    body = "\n".join(" " * 6 + line for line in lines)
    return (
        '# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO\ninput_stream: "HTTP_REQUEST_PAYLOAD:input"\n'
        f'output_stream: "HTTP_RESPONSE_PAYLOAD:output"\nnode {{\n{node}'
        f"  node_options: {{\n    [type.googleapis.com / mediapipe.{options}]: {{\n{body}\n    }}\n  }}{tail}\n}}"
    )


def check_runs(graph_path: Path, plan: SpeechPlan) -> None:
    """Build the pipeline the server builds from the graph (on CPU) and transcribe a 1 s tone (with
    word timestamps when enabled), or speak a word in every voice."""
    import numpy as np

    from ovserve.engine.pipelines import build_pipeline
    from ovserve.engine.speech import SpeechToText, TextToSpeech
    from ovserve.export.verification import ovserve_settings

    started = time.monotonic()
    spec = ovserve_settings(graph_path, plan.model_name).engine_spec()
    spec = replace(spec, device="CPU", plugin_config={k: v for k, v in spec.plugin_config.items() if k != "CACHE_DIR"})
    stage(f"check: loading the {plan.task.replace('_', ' ')} model as the server does (on CPU)")
    try:
        model = build_pipeline(spec)
        if isinstance(model, SpeechToText):
            tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(16_000) / 16_000)).astype(np.float32)
            transcript = model.transcribe(
                tone, task="transcribe", language=None, prompt=None, temperature=0.0, timestamps=False,
                words=spec.word_timestamps, max_new_tokens=8, on_delta=lambda _: False,
            )  # fmt: skip
            words = f", {len(transcript.words)} timed words" if spec.word_timestamps else ""
            result = f"transcribed a 1 s tone as {transcript.text[:60]!r}{words}"
        elif isinstance(model, TextToSpeech):
            spoken = []
            voices: list[str | None] = [*model.voices] or [None]
            for voice in voices:
                samples, rate = model.synthesize("Hello", voice, 1.0)
                spoken.append(f"{voice or 'the default voice'} ({len(samples) / rate:.2f} s)")
            result = f"spoke 'Hello' in {', '.join(spoken)}"
        else:
            raise ExportError(f"the graph describes a {spec.kind.value} model, not {plan.task}")
    except (RuntimeError, ValueError) as exc:  # OpenVINO's errors; ValueError: a voice of the wrong size
        raise load_failure(exc) from exc
    stage(f"check: {result} in {time.monotonic() - started:.1f} s")


def export_speech(plan: SpeechPlan) -> None:
    """The text-generation export's steps for a speech model (see the module docstring)."""
    from ovserve.engine.speech import alignment_heads
    from ovserve.export.conversion import export_environment, export_ir, finalize_export, quantization_config
    from ovserve.export.repository import (
        add_servable,
        check_not_overlapping,
        check_target_free,
        staging_directory,
        swap_into_place,
    )
    from ovserve.export.source import check_disk, check_tokenizer, resolve_source

    started = time.monotonic()
    target = plan.model_dir
    check_target_free(target, plan.overwrite, plan.config_path)
    source = resolve_source(plan.source)
    stage(f"source: {source.describe()}")
    check_not_overlapping(source.local_dir, target)
    config = source.config()
    expected = MODEL_TYPES[plan.task]
    if config.get("model_type") != expected:
        raise ExportError(
            f"{source.describe()} is a '{config.get('model_type')}' model; ovserve serves {plan.task} with "
            f"{expected} models only"
        )
    check_tokenizer(source)
    if plan.enable_word_timestamps:
        generation_config = source.fetch("generation_config.json")
        if generation_config is None or not alignment_heads(generation_config.parent):
            raise ExportError(
                f"--enable_word_timestamps: {source.describe()} names no alignment_heads in its "
                "generation_config.json (the cross-attention heads that align text to audio)"
            )
    dimension = config.get("speaker_embedding_dim")
    if plan.voice is not None and isinstance(dimension, int) and plan.voice[1].stat().st_size != dimension * 4:
        raise ExportError(
            f"--speaker_path {plan.voice[1]} holds {plan.voice[1].stat().st_size // 4} float32 values; "
            f"{source.describe()}'s speaker embeddings have {dimension} (speaker_embedding_dim)"
        )
    sources = [(source, config)]
    model_kwargs = None
    if plan.vocoder is not None:
        vocoder = resolve_source(plan.vocoder)
        stage(f"vocoder: {vocoder.describe()}")
        sources.append((vocoder, vocoder.config()))
        model_kwargs = {"vocoder": vocoder.model_name_or_path}
    check_disk(target, plan.weight_format, sources)
    stage("loading optimum-intel")
    compression = quantization_config(plan.weight_format, plan.quantization_params, source.id)
    task = OPTIMUM_TASKS[plan.task]
    with staging_directory(target) as staging:
        staged = staging / "model"
        with export_environment(staging):
            export_ir(source, staged, task, plan.weight_format, compression, "model", model_kwargs)
            finalize_export(source, staged, task)
        if plan.voice is not None:
            name, path = plan.voice
            (staged / "voices").mkdir(exist_ok=True)
            shutil.copyfile(path, staged / voice_file(name))
        graph_path = staged / "graph.pbtxt"
        graph_path.write_text(render_graph(plan), encoding="utf-8")
        check_runs(graph_path, plan)
        swap_into_place(staged, target, staging / "replaced")
    stage(f"wrote {target} and its graph.pbtxt")
    updated = add_servable(plan.config_path, plan.model_name, os.path.relpath(target, plan.config_path.parent))
    stage(f"{'updated' if updated else 'added'} '{plan.model_name}' in {plan.config_path}")
    stage(f"done in {time.monotonic() - started:.0f} s; serve it with: ovserve serve --config_path {plan.config_path}")
