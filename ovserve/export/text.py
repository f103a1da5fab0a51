"""``text_generation``: export an LLM or a VLM (and a draft model for speculative decoding).

Takes OVMS ``export_model.py``'s argument names (:func:`add_text_arguments`) and decides the plan
from them (:func:`plan_from_args`): defaults resolved (int4 symmetric weights for NPU), impossible
combinations refused, the graph's options collected (:class:`~ovserve.export.repository.GraphOptions`).
:class:`TextOptions` is what text generation adds to the export's steps
(:func:`ovserve.export.driver.export`): the task detected from the checkpoint (text or
image-text-to-text), the draft converted into its sub-directory, ``graph.pbtxt`` as OVMS's template
renders it, and a check that generates a token (:func:`~ovserve.export.verification.check_loads`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovserve.export.arguments import (
    add_cache_dir_argument,
    add_task_parser,
    check_cache_dir,
    check_model_name,
    check_source,
    default_name,
    non_negative_int,
)
from ovserve.export.conversion import (
    TEXT_TASK,
    detect_task,
    export_ir,
    finalize_export,
    quantization_config,
)
from ovserve.export.driver import Checkpoint, Options, Plan
from ovserve.export.report import ExportError, stage
from ovserve.export.repository import GraphOptions, check_not_overlapping, render_graph
from ovserve.export.source import Source, check_tokenizer, resolve_source
from ovserve.export.verification import check_loads
from ovserve.json_types import JsonObject
from ovserve.parsers import PARSER_OFF, REASONING_PARSERS, TOOL_PARSERS
from ovserve.settings.graph import PIPELINE_TYPES
from ovserve.settings.schema import ModelSettings

NPU_QUANTIZATION_PARAMS = "--sym --ratio 1.0 --group-size -1"


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_text_arguments(tasks: Any) -> None:
    """The ``text_generation`` subcommand under the export command's subparsers ``tasks``."""
    text = add_task_parser(
        tasks,
        "text_generation",
        "an LLM or VLM for the chat/completions endpoints",
        plan_from_args,
        device_help="CPU, GPU or NPU (NPU: int4 symmetric weights)",
    )
    add_cache_dir_argument(text)
    text.add_argument("--pipeline_type", choices=PIPELINE_TYPES, help="written to the graph; AUTO when omitted")
    text.add_argument("--kv_cache_precision", choices=["u8"], help="KV cache precision (plugin_config)")
    text.add_argument(
        "--enable_prefix_caching",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="{true,false}",
        help="written to the graph (default true, as ovserve serve's flag; 'false' to turn it off)",
    )
    text.add_argument("--disable_dynamic_split_fuse", dest="dynamic_split_fuse", action="store_false")
    text.add_argument("--max_num_batched_tokens", type=non_negative_int)
    text.add_argument("--max_num_seqs", type=non_negative_int, default=256)
    text.add_argument("--cache_size", type=non_negative_int, default=10, help="KV cache in GB (0: grow on demand)")
    text.add_argument("--draft_source_model", help="draft model (Hub id or directory) for speculative decoding")
    text.add_argument("--draft_model_name", help="the draft's sub-directory name (default: from its source)")
    text.add_argument("--max_prompt_len", type=int, help="NPU only: longest prompt in tokens")
    text.add_argument("--prompt_lookup_decoding", action="store_true", help="serve with prompt-lookup decoding")
    # The server's parser registry: a graph naming another parser would not load. Omitted, the
    # server detects the parser from the chat template when it loads the model.
    text.add_argument(
        "--tool_parser",
        choices=[*sorted(TOOL_PARSERS), PARSER_OFF],
        help=f"default: detected from the chat template when served; {PARSER_OFF}: no tool-call parsing",
    )
    text.add_argument(
        "--reasoning_parser",
        choices=[*sorted(REASONING_PARSERS), PARSER_OFF],
        help=f"default: detected from the chat template when served; {PARSER_OFF}: no reasoning parsing",
    )


@dataclass(frozen=True)
class TextOptions(Options):
    """Text generation's part of the plan: the draft model, if any, and the graph's options."""

    draft_source: str | None
    graph: GraphOptions

    def other_checkpoints(self, target: Path) -> list[Checkpoint]:
        if not self.draft_source:
            return []
        draft = resolve_source(self.draft_source)
        stage(f"draft source: {draft.describe()}")
        check_not_overlapping(draft.local_dir, target)
        checkpoint = (draft, draft.config())
        check_tokenizer(draft)
        return [checkpoint]

    def optimum_task(self, source: Source, config: JsonObject, others: list[Checkpoint]) -> str:
        task = detect_task(source, config)
        stage(f"model type {config.get('model_type')} -> task {task}")
        for draft, draft_config in others:
            if detect_task(draft, draft_config) != TEXT_TASK:
                raise ExportError(f"the draft model must be a text model; {draft.describe()} is a VLM")
        return task

    def more_stage(self) -> str | None:
        return "draft model" if self.draft_source and self.graph.draft_dir_name else None

    def convert_more(self, staged: Path, weight_format: str, others: list[Checkpoint]) -> None:
        if not others or not self.graph.draft_dir_name:
            return
        draft = others[0][0]
        # OVMS exports the draft at the model's weight format, without the extra parameters.
        compression = quantization_config(weight_format, [], draft.id)
        draft_dir = staged / self.graph.draft_dir_name
        export_ir(draft, draft_dir, TEXT_TASK, weight_format, compression, "draft")
        finalize_export(draft, draft_dir, TEXT_TASK)

    def render_graph(self) -> str:
        return render_graph(self.graph)

    def check(self, settings: ModelSettings, task: str, source: Source) -> None:
        check_loads(settings, task, source)


def plan_from_args(args: argparse.Namespace) -> Plan[TextOptions]:
    """Resolve defaults and refuse impossible combinations; touches nothing on disk."""
    if args.draft_source_model:
        check_source("--draft_source_model", args.draft_source_model)
    weight_format = args.weight_format
    extra = args.extra_quantization_params
    device = args.target_device
    if device.upper() == "NPU":
        # The NPU plugin runs int4 symmetric channel-wise weights only (OVMS's rule).
        if weight_format != "int4":
            stage(f"NPU target: weight format {weight_format} -> int4")
            weight_format = "int4"
        if not extra:
            stage(f"NPU target: quantization parameters {NPU_QUANTIZATION_PARAMS}")
            extra = NPU_QUANTIZATION_PARAMS

    plugin_config: JsonObject = {}
    if args.kv_cache_precision:
        plugin_config["KV_CACHE_PRECISION"] = args.kv_cache_precision
    if args.max_prompt_len is not None:
        if device.upper() != "NPU":
            raise ExportError("--max_prompt_len is an NPU setting; use it with --target_device NPU")
        if args.max_prompt_len <= 0:
            raise ExportError(f"--max_prompt_len must be a positive integer, got {args.max_prompt_len}")
        plugin_config["MAX_PROMPT_LEN"] = args.max_prompt_len
    if args.ov_cache_dir:
        check_cache_dir(args.ov_cache_dir)
        plugin_config["CACHE_DIR"] = args.ov_cache_dir
    if args.prompt_lookup_decoding:
        plugin_config["prompt_lookup"] = True

    draft_source = args.draft_source_model or args.draft_model_name
    draft_dir_name = None
    if draft_source:
        if args.prompt_lookup_decoding:
            raise ExportError("--draft_source_model and --prompt_lookup_decoding exclude each other: pick one")
        if args.pipeline_type == "LM":
            raise ExportError("speculative decoding needs a continuous batching pipeline, not --pipeline_type LM")
        # OVMS flattens the draft's name into one directory level: "Qwen/Qwen2.5-0.5B" -> "Qwen-Qwen2.5-0.5B".
        draft_name = args.draft_model_name if args.draft_source_model and args.draft_model_name else None
        draft_dir_name = (draft_name or default_name(draft_source)).replace("/", "-")
        check_model_name(draft_dir_name)
    if args.pipeline_type == "VLM":
        raise ExportError("ovserve serves VLMs with continuous batching: use --pipeline_type VLM_CB or AUTO, not VLM")

    graph = GraphOptions(
        target_device=device,
        pipeline_type=args.pipeline_type,
        plugin_config=plugin_config,
        enable_prefix_caching=args.enable_prefix_caching,
        cache_size=args.cache_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        dynamic_split_fuse=args.dynamic_split_fuse,
        max_num_seqs=args.max_num_seqs,
        draft_dir_name=draft_dir_name,
        reasoning_parser=args.reasoning_parser,
        tool_parser=args.tool_parser,
    )
    options = TextOptions(draft_source=draft_source, graph=graph)
    return Plan.from_args(args, options, weight_format=weight_format, extra=extra)
