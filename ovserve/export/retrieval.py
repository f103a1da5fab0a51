"""``embeddings_ov`` / ``rerank_ov`` (aliases ``embeddings`` / ``rerank``): export an embedding model or a
cross-encoder reranker into an OVMS model repository.

Takes OVMS ``export_model.py``'s argument names for those tasks (:func:`add_retrieval_arguments`)
and runs the text-generation export's steps and guarantees (:mod:`ovserve.export`): cheap checks
first, conversion with optimum-intel (``feature-extraction`` / ``text-classification``) into a
staging directory, ``graph.pbtxt`` as OVMS's ``embedding_graph_ov_template`` / ``rerank_graph_ov_template``
render it, a check that ovserve reads the graph and that the pipeline it describes embeds (or
scores) a text, then the swap into place and the ``config.json`` entry. A failure at any step
leaves the repository as it was. Raises :class:`~ovserve.export.report.ExportError`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
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
from ovserve.json_types import JsonObject
from ovserve.settings.graph import POOLING_TYPES

# Subcommand -> task; OVMS's names first, ovserve's short aliases second.
RETRIEVAL_COMMANDS = {
    "embeddings_ov": "embeddings",
    "embeddings": "embeddings",
    "rerank_ov": "rerank",
    "rerank": "rerank",
}
# optimum-intel's export task for each.
OPTIMUM_TASKS = {"embeddings": "feature-extraction", "rerank": "text-classification"}


def add_retrieval_arguments(tasks: Any) -> None:
    """``embeddings_ov`` and ``rerank_ov`` under the export command's subparsers ``tasks``."""
    for command, alias, what in (("embeddings_ov", "embeddings", "an embedding model"),
                                 ("rerank_ov", "rerank", "a cross-encoder reranker")):  # fmt: skip
        parser = tasks.add_parser(
            command,
            aliases=[alias],
            help=f"export {what} for /v3/{alias}",
            description=f"Export {what} to OpenVINO IR and add it to an OVMS model repository.",
        )
        parser.add_argument("--source_model", required=True, help="Hugging Face model id, or a local checkpoint")
        parser.add_argument("--model_name", help="name clients send as 'model' (default: the id or directory name)")
        parser.add_argument("--model_repository_path", type=Path, default=Path("models"), help="repository root")
        parser.add_argument("--config_file_path", type=Path, help="config.json (default: MODEL_REPOSITORY/config.json)")
        parser.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS, default="int8")
        parser.add_argument("--target_device", default="CPU", help="CPU, GPU or NPU")
        parser.add_argument("--extra_quantization_params", help="optimum-cli compression options (int8/int4 only)")
        parser.add_argument("--num_streams", type=_non_negative_int, default=0, help="plugin_config NUM_STREAMS")
        parser.add_argument("--overwrite_models", action="store_true", help="replace an existing model directory")
        if alias == "embeddings":
            parser.add_argument(
                "--skip_normalize", dest="normalize", action="store_false", help="do not L2-normalise embeddings"
            )
            parser.add_argument("--pooling", choices=POOLING_TYPES, help="pooling (default: CLS, as OVMS)")
            parser.add_argument("--truncate", action="store_true", help="cut inputs over the model's limit")
        else:
            parser.add_argument("--max_allowed_chunks", type=_non_negative_int, help="most documents per request")


@dataclass(frozen=True)
class RetrievalPlan:
    task: str  # "embeddings" or "rerank"
    source: str
    model_name: str
    repository: Path
    config_path: Path
    weight_format: str
    quantization_params: list[str]
    target_device: str
    plugin_config: JsonObject
    overwrite: bool
    normalize: bool = True
    pooling: str | None = None
    truncate: bool = False
    max_allowed_chunks: int | None = None

    @property
    def model_dir(self) -> Path:
        return self.repository / self.model_name


def plan_from_args(args: argparse.Namespace) -> RetrievalPlan:
    """Defaults resolved, impossible combinations refused; nothing on disk is touched."""
    _check_source("--source_model", args.source_model)
    repository = args.model_repository_path.expanduser().resolve()
    extra = args.extra_quantization_params
    if extra and args.weight_format not in {"int8", "int4"}:
        raise ExportError(f"--extra_quantization_params apply to int8 and int4 weights, not {args.weight_format}")
    params = shlex.split(extra) if extra else []
    parse_compression_options(args.weight_format, params)
    return RetrievalPlan(
        task=RETRIEVAL_COMMANDS[args.task],
        source=args.source_model,
        model_name=_check_model_name(args.model_name or _default_name(args.source_model)),
        repository=repository,
        config_path=(args.config_file_path or repository / "config.json").expanduser().resolve(),
        weight_format=args.weight_format,
        quantization_params=params,
        target_device=args.target_device,
        plugin_config={"NUM_STREAMS": str(args.num_streams)} if args.num_streams else {},
        overwrite=args.overwrite_models,
        normalize=getattr(args, "normalize", True),
        pooling=getattr(args, "pooling", None),
        truncate=getattr(args, "truncate", False),
        max_allowed_chunks=getattr(args, "max_allowed_chunks", None),
    )


def render_graph(plan: RetrievalPlan) -> str:
    """graph.pbtxt as OVMS's embeddings_ov / rerank_ov templates render it (plus the options they lack)."""
    if plan.task == "embeddings":
        lines = ['models_path: "./",', f"normalize_embeddings: {'true' if plan.normalize else 'false'},"]
        if plan.pooling:
            lines.append(f"pooling: {plan.pooling},")
        if plan.truncate:
            lines.append("truncate: true,")
        head = ("EmbeddingsExecutor", "EMBEDDINGS_NODE_RESOURCES:embeddings_servable", "EmbeddingsCalculatorOV")
    else:
        lines = ['models_path: "./",']
        if plan.max_allowed_chunks:
            lines.append(f"max_allowed_chunks: {plan.max_allowed_chunks},")
        head = ("RerankExecutor", "RERANK_NODE_RESOURCES:rerank_servable", "RerankCalculatorOV")
    if plan.plugin_config:
        lines.append(f"plugin_config: '{json.dumps(plan.plugin_config)}',")
    lines.append(f'target_device: "{plan.target_device}"')
    name, side_packet, calculator = head
    options = "\n".join(" " * 6 + line for line in lines)
    return (
        '\ninput_stream: "REQUEST_PAYLOAD:input"\noutput_stream: "RESPONSE_PAYLOAD:output"\nnode {\n'
        f'  name: "{name}"\n  input_side_packet: "{side_packet}"\n  calculator: "{calculator}"\n'
        '  input_stream: "REQUEST_PAYLOAD:input"\n  output_stream: "RESPONSE_PAYLOAD:output"\n'
        f"  node_options: {{\n    [type.googleapis.com / mediapipe.{calculator}Options]: {{\n{options}\n"
        "    }\n  }\n}\n"
    )


def check_runs(graph_path: Path, plan: RetrievalPlan) -> None:
    """Build the pipeline the server builds from the graph (on CPU) and embed or score one text."""
    from ovserve.engine.pipelines import build_pipeline
    from ovserve.export.verification import ovserve_settings

    started = time.monotonic()
    spec = ovserve_settings(graph_path, plan.model_name).engine_spec()
    spec = replace(spec, device="CPU", plugin_config={k: v for k, v in spec.plugin_config.items() if k != "CACHE_DIR"})
    stage(f"check: loading the {plan.task} model as the server does (on CPU)")
    try:
        pipe = build_pipeline(spec)
        if plan.task == "embeddings":
            result = f"a {len(pipe.embed(['Hello'])[0])}-dimensional embedding"
        else:
            result = f"relevance {pipe.score('Hello', ['Hello there'])[0]:.3f}"
    except (RuntimeError, ValueError) as exc:  # OpenVINO's errors; ValueError: a tokenizer the reranker cannot read
        raise load_failure(exc) from exc
    stage(f"check: {result} in {time.monotonic() - started:.1f} s")


def export_retrieval(plan: RetrievalPlan) -> None:
    """The text-generation export's steps for an embeddings or rerank model (see the module docstring)."""
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
    check_tokenizer(source)
    check_disk(target, plan.weight_format, [(source, config)])
    stage("loading optimum-intel")
    compression = quantization_config(plan.weight_format, plan.quantization_params, source.id)
    task = OPTIMUM_TASKS[plan.task]
    with staging_directory(target) as staging:
        staged = staging / "model"
        with export_environment(staging):
            export_ir(source, staged, task, plan.weight_format, compression, "model")
            finalize_export(source, staged, task)
        graph_path = staged / "graph.pbtxt"
        graph_path.write_text(render_graph(plan), encoding="utf-8")
        check_runs(graph_path, plan)
        swap_into_place(staged, target, staging / "replaced")
    stage(f"wrote {target} and its graph.pbtxt")
    updated = add_servable(plan.config_path, plan.model_name, os.path.relpath(target, plan.config_path.parent))
    stage(f"{'updated' if updated else 'added'} '{plan.model_name}' in {plan.config_path}")
    stage(f"done in {time.monotonic() - started:.0f} s; serve it with: ovserve serve --config_path {plan.config_path}")
