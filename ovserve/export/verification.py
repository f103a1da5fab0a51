"""Verification of a staged export: the graph ovserve would read, the pipeline it would build.

Takes the staged ``graph.pbtxt`` (see :func:`ovserve.export.driver.export`), the served model
name, the task and the source. :func:`ovserve_settings` parses the graph exactly as
``ovserve serve --config_path`` does; :func:`check_loads` builds the generation pipeline those
settings describe in openvino_genai (always on CPU, with a KV cache that grows on demand, so the
exporting machine needs neither the target device nor its memory) and generates one token, with an
image for a VLM; :func:`check_runs` builds any other pipeline on CPU and runs what the caller
gives it once (embed a text, transcribe a tone...).

Guarantees: nothing is written; a model that passes loads in the server. Raises
:class:`~ovserve.export.report.ExportError` if ovserve would refuse the graph, if the checkpoint's
chat template did not reach the converted tokenizer, or if openvino_genai cannot load or run the
model. openvino_genai and the engine's pipeline builder are imported inside :func:`check_loads`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.errors import first_complaint
from ovserve.export.conversion import VLM_TASK
from ovserve.export.report import ExportError, load_failure, stage
from ovserve.export.source import Source, template_in_source
from ovserve.settings.graph import GraphError, parse_graph
from ovserve.settings.schema import ModelSettings


def ovserve_settings(graph_path: Path, name: str) -> ModelSettings:
    """What ``ovserve serve --config_path`` makes of the graph; ExportError if it would refuse it."""
    try:
        return ModelSettings.from_graph(name, parse_graph(graph_path))
    except GraphError as exc:
        raise ExportError(f"ovserve refuses the written graph: {exc}") from exc
    except ValidationError as exc:
        raise ExportError(f"ovserve refuses the written graph: {first_complaint(exc).message}") from exc


# Plugin properties for the target device that the CPU check must not get: NPU-only keys, and the
# deployment's compilation cache, which a check on the export machine should not fill.
_NOT_FOR_THE_CPU_CHECK = {"MAX_PROMPT_LEN", "CACHE_DIR"}


def check_loads(settings: ModelSettings, task: str, source: Source) -> None:
    """Build the pipeline the server will build from the graph and generate a token, so a broken
    export fails here, before the repository changes. On CPU, with a KV cache that grows on demand:
    the exporting machine may lack the target device, and the check needs a few blocks only."""
    import numpy as np
    import openvino as ov
    import openvino_genai

    from ovserve.engine.pipelines import build_pipeline

    started = time.monotonic()
    spec = settings.engine_spec()
    grow = {"cache_size": 0}
    spec = replace(
        spec,
        device="CPU",
        draft_device="CPU" if spec.draft_models_path else None,
        scheduler=spec.scheduler.model_copy(update=grow),
        draft_scheduler=spec.draft_scheduler.model_copy(update=grow) if spec.draft_scheduler else None,
        plugin_config={k: v for k, v in spec.plugin_config.items() if k not in _NOT_FOR_THE_CPU_CHECK},
    )
    kind = f"{'VLM ' if task == VLM_TASK else ''}{spec.kind.value.replace('_', ' ')}"
    stage(f"check: loading in openvino_genai ({kind} pipeline on CPU) and generating a token")
    tokenizer = openvino_genai.Tokenizer(str(spec.model_path))
    has_template = bool(tokenizer.chat_template)
    if template_in_source(source) and not has_template:
        raise ExportError(f"the chat template of {source.describe()} did not reach openvino_tokenizer.xml")
    if not has_template:
        stage("note: the model has no chat template; chat requests need one (this may be a base model)")
    try:
        pipe = build_pipeline(spec)
        config = pipe.get_config() if spec.kind.continuous_batching else pipe.get_generation_config()
        config.max_new_tokens = 1
        config.do_sample = False
        config.apply_chat_template = has_template
        if spec.kind in {PipelineKind.SPECULATIVE, PipelineKind.PROMPT_LOOKUP}:
            config.num_assistant_tokens = 2
        if spec.kind is PipelineKind.PROMPT_LOOKUP:
            config.max_ngram_size = 2
        if task == VLM_TASK:
            image = ov.Tensor(np.full((1, 64, 64, 3), 128, dtype=np.uint8))
            results: Any = pipe.generate(["Describe the image."], images=[[image]], generation_config=[config])
            text = results[0].texts[0] if results[0].texts else ""
        elif spec.kind.continuous_batching:
            text = pipe.generate(["Hello"], [config])[0].m_generation_ids[0]
        else:
            text = str(pipe.generate("Hello", config))
    except RuntimeError as exc:
        # OpenVINO's messages span lines (file:line of each frame); one line, the gist first.
        detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        detail = (detail[:400] + " ...") if len(detail) > 400 else detail or type(exc).__name__
        raise ExportError(f"the exported model does not load in openvino_genai: {detail}") from exc
    stage(f"check: generated {text!r} in {time.monotonic() - started:.1f} s")


def check_runs(settings: ModelSettings, what: str, run: Callable[[EngineSpec], str]) -> None:
    """Build the pipeline the server builds from ``settings`` on CPU (``run`` builds it from the
    spec it is given) and report what ``run`` did with it; OpenVINO's failures (RuntimeError, and
    ValueError: a tokenizer a reranker cannot read, a voice of the wrong size) are the user's."""
    started = time.monotonic()
    spec = settings.engine_spec()
    spec = replace(spec, device="CPU", plugin_config={k: v for k, v in spec.plugin_config.items() if k != "CACHE_DIR"})
    stage(f"check: loading the {what} model as the server does (on CPU)")
    try:
        result = run(spec)
    except (RuntimeError, ValueError) as exc:
        raise load_failure(exc) from exc
    stage(f"check: {result} in {time.monotonic() - started:.1f} s")
