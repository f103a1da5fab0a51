"""Conversion to OpenVINO IR with optimum-intel's Python API, as ``optimum-cli export openvino`` does it.

Takes a resolved :class:`~ovserve.export.source.Source`, the weight format and the parsed
``--extra_quantization_params``, and an output directory inside the staging directory (see
:func:`~ovserve.export.repository.staging_directory`). :func:`detect_task` asks optimum-intel what
the checkpoint exports as (text or image-text-to-text); :func:`quantization_config` builds the
weight-compression config optimum-cli would; :func:`convert_ir` runs ``main_export`` and
:func:`compress_ir` nncf weight compression (the driver reports them as two stages; :func:`export_ir`
runs both, for a draft); :func:`finalize_export` puts back the checkpoint's own tokenizer and generation
files. Run these inside :func:`export_environment`, which keeps temporary files on the
staging directory's filesystem and restores every global setting it changes.

Guarantees: the output directory holds the IR, openvino_{de,}tokenizer and the checkpoint's HF
configs; nothing outside it is written, except the Hugging Face cache (a Hub download). Raises
:class:`~ovserve.export.report.ExportError` for a model type optimum-intel cannot export for text
generation, a tokenizer openvino-tokenizers cannot convert, and a VLM without an image processor
configuration. torch, transformers and optimum-intel are imported inside the functions, never when
this module is imported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ovserve.export.arguments import parse_compression_options
from ovserve.export.report import ExportError, stage
from ovserve.export.source import Source
from ovserve.json_types import JsonObject, json_list

TEXT_TASK = "text-generation-with-past"
VLM_TASK = "image-text-to-text"
# Text to speech (SpeechT5) has a tokenizer and no detokenizer: it writes audio, not text.
TEXT_TO_AUDIO_TASK = "text-to-audio"
OPTIMUM_MODELS_URL = "https://huggingface.co/docs/optimum-intel/openvino/models"

# The checkpoint's own copies replace what the exporter re-saved: transformers 5 re-saves the
# tokenizer with tokenizer_class "TokenizersBackend" (unknown to transformers 4) and moves the
# chat template to chat_template.jinja; served files should be the model author's.
KEPT_SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
)


def detect_task(source: Source, config: JsonObject) -> str:
    """text-generation-with-past or image-text-to-text, from the model type optimum-intel registers."""
    from optimum.exporters.openvino import model_configs  # noqa: F401  (registers the OpenVINO export configs)
    from optimum.exporters.tasks import TasksManager

    model_type = str(config.get("model_type") or "")
    architectures = ", ".join(str(name) for name in json_list(config.get("architectures"))) or "no architectures listed"
    if not model_type:
        raise ExportError(f"{source.describe()}: config.json has no model_type; cannot tell what model this is")
    try:
        tasks = TasksManager.get_supported_tasks_for_model_type(
            model_type, exporter="openvino", library_name="transformers"
        )
    except KeyError:
        raise ExportError(
            f"optimum-intel cannot export model type '{model_type}' ({architectures}) to OpenVINO: "
            f"it is not among the supported architectures ({OPTIMUM_MODELS_URL}); "
            "a newer optimum-intel may support it"
        ) from None
    # A model type with both tasks (a VLM family's text-only variant) is a VLM when it has a vision tower.
    if VLM_TASK in tasks and (TEXT_TASK not in tasks or "vision_config" in config):
        return VLM_TASK
    if TEXT_TASK in tasks:
        return TEXT_TASK
    raise ExportError(
        f"optimum-intel exports model type '{model_type}' ({architectures}) only for {', '.join(sorted(tasks))}, "
        "not for text generation: it is not a chat or completion model"
    )


def quantization_config(weight_format: str, params: list[str], model_id: str) -> dict[str, Any] | None:
    """The weight-compression config optimum-cli builds for ``--weight-format F PARAMS``: its own
    helpers, so model-specific default configs (tuned int4 settings for known Hub ids) apply too."""
    if not compresses(weight_format):
        return None
    from optimum.commands.export.openvino import no_compression_parameter_provided, prepare_wc_config
    from optimum.intel.openvino.configuration import _DEFAULT_4BIT_WQ_CONFIG, get_default_quantization_config

    args = parse_compression_options(weight_format, params, model_id)
    config: dict[str, Any] = prepare_wc_config(args, _DEFAULT_4BIT_WQ_CONFIG)
    if no_compression_parameter_provided(args):
        default = get_default_quantization_config(model_id, weight_format)
        if default is not None:
            stage(f"using optimum-intel's tuned {weight_format} config for {model_id}: {default}")
            config = default
        elif weight_format == "int4":
            config = dict(_DEFAULT_4BIT_WQ_CONFIG)
    return config


@contextlib.contextmanager
def export_environment(staging: Path) -> Iterator[None]:
    """Keep optimum's temporary files on the target's filesystem and its expected noise down.

    nncf's compression step writes through tempfile and renames into the output, which fails
    across filesystems (a tmpfs /tmp); tracing prints TracerWarnings that say nothing to a user.
    Progress bars and optimum's own warnings stay. Everything is restored, since tests may call this in-process.
    """
    import torch
    from transformers.utils import logging as hf_logging

    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(staging)
    # transformers' deprecation notes about its own internals, raised while optimum traces the model.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    # Offline, reloading the exported IR for compression looks the directory up as a Hub cache
    # entry first and logs "Could not infer whether the model was already converted": harmless.
    reload_logger = logging.getLogger("optimum.intel.openvino.modeling_base")
    saved_level = reload_logger.level
    reload_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            yield
    finally:
        reload_logger.setLevel(saved_level)
        hf_logging.set_verbosity(verbosity)
        tempfile.tempdir = saved_tempdir


def compresses(weight_format: str) -> bool:
    """Whether an export at ``weight_format`` compresses its weights with nncf (int8, int4)."""
    return weight_format not in {"fp16", "fp32"}


def _export_arguments(
    source: Source, task: str, model_kwargs: dict[str, Any] | None, library_name: str
) -> dict[str, Any]:
    """What ``main_export`` and the compression pass both take: the checkpoint and its task."""
    common: dict[str, Any] = {
        "model_name_or_path": source.model_name_or_path,
        "task": task,
        "library_name": library_name,
        # As OVMS's export_model.py: models such as phi3_v or internvl ship their own code (its
        # image export passes no --trust-remote-code: a diffusers pipeline runs no code of its own).
        "trust_remote_code": library_name == "transformers",
    }
    if model_kwargs:
        common["model_kwargs"] = model_kwargs
    return common


def convert_ir(
    source: Source,
    output: Path,
    task: str,
    weight_format: str,
    compression: Any,
    label: str,
    model_kwargs: dict[str, Any] | None = None,
    library_name: str = "transformers",
) -> None:
    """optimum-cli export openvino's conversion (``main_export``), in-process, without its second
    compression pass (:func:`compress_ir`): ``model_kwargs``, SpeechT5's ``{"vocoder": ...}``; a
    diffusers pipeline (``library_name`` "diffusers") without --trust-remote-code, as OVMS's
    script exports it."""
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    ov_config = OVConfig(dtype=weight_format) if compression is None else OVConfig(quantization_config=compression)
    stage(f"{label}: converting {source.describe()} to OpenVINO IR ({task})")
    main_export(
        output=output,
        ov_config=ov_config,
        convert_tokenizer=True,
        local_files_only=source.local_dir is not None,
        **_export_arguments(source, task, model_kwargs, library_name),
    )


def compress_ir(
    source: Source,
    output: Path,
    task: str,
    weight_format: str,
    compression: Any,
    label: str,
    model_kwargs: dict[str, Any] | None = None,
    library_name: str = "transformers",
) -> None:
    """optimum-cli's second pass: nncf compresses the converted IR in ``output`` with ``compression``
    (not needed for the GPT-OSS two-pass config, which ``main_export`` already applied)."""
    from optimum.exporters.openvino.__main__ import _main_quantize
    from optimum.intel.openvino.configuration import _GPTOSSQuantizationConfig

    if not compression:
        return
    if isinstance(compression, _GPTOSSQuantizationConfig):
        stage(f"{label}: weights compressed to {weight_format} during the conversion (GPT-OSS two-pass config)")
        return
    stage(f"{label}: compressing weights to {weight_format} (nncf)")
    from huggingface_hub import constants

    common = _export_arguments(source, task, model_kwargs, library_name)
    _main_quantize(quantization_config=compression, output=output, cache_dir=constants.HF_HUB_CACHE, **common)


def export_ir(source: Source, output: Path, task: str, weight_format: str, compression: Any, label: str) -> None:
    """:func:`convert_ir` then :func:`compress_ir`, as one step (a draft model)."""
    started = time.monotonic()
    convert_ir(source, output, task, weight_format, compression, label)
    compress_ir(source, output, task, weight_format, compression, label)
    stage(f"{label}: converted in {time.monotonic() - started:.1f} s")


def finalize_export(source: Source, output: Path, task: str) -> None:
    """Put back the checkpoint's tokenizer/generation files and check what the server needs is there."""
    for name in KEPT_SOURCE_FILES:
        original = source.fetch(name)
        if original is not None:
            shutil.copyfile(original, output / name)
    # transformers 5 also wrote the template to chat_template.jinja; when the checkpoint keeps it in
    # tokenizer_config.json, one copy of the template is enough (and cannot drift).
    if "chat_template.jinja" not in source.files and (output / "chat_template.jinja").exists():
        tokenizer_config = output / "tokenizer_config.json"
        with contextlib.suppress(OSError, ValueError):
            if "chat_template" in json.loads(tokenizer_config.read_text(encoding="utf-8")):
                (output / "chat_template.jinja").unlink()

    if task == VLM_TASK and not (output / "preprocessor_config.json").exists():
        # openvino_genai reads a flat preprocessor_config.json; transformers 5 saves the image
        # processor nested in processor_config.json, and without the flat file the vision encoder
        # fails with a shape mismatch at the first image.
        nested = output / "processor_config.json"
        image_processor = None
        with contextlib.suppress(OSError, ValueError):
            image_processor = json.loads(nested.read_text(encoding="utf-8")).get("image_processor")
        if not isinstance(image_processor, dict):
            raise ExportError(
                f"{source.describe()} has no image processor configuration (preprocessor_config.json): "
                "the vision encoder cannot be used without it"
            )
        (output / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2) + "\n")

    needed = ["openvino_tokenizer.xml", *([] if task == TEXT_TO_AUDIO_TASK else ["openvino_detokenizer.xml"])]
    missing = [name for name in needed if not (output / name).exists()]
    if missing:
        raise ExportError(
            f"openvino-tokenizers could not convert the tokenizer of {source.describe()} "
            f"(no {' or '.join(missing)}; optimum's warning above says why)"
        )
