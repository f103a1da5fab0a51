"""The ``text_generation`` command line, and the plan decided from it before any heavy work.

Takes OVMS ``export_model.py``'s argument names (:func:`add_export_arguments`) and turns the parsed
arguments into an :class:`ExportPlan` (:func:`plan_from_args`): defaults resolved (the model name
from the source, ``config.json`` in the repository, int4 symmetric weights for NPU), the graph's
options collected, and ``--extra_quantization_params`` parsed by optimum-cli's own option parser
(:func:`parse_compression_options`) so they mean what they mean there.

Guarantees: nothing on disk is read or written, beyond checking that a source given as a path is a
directory, and torch is not imported (only optimum's command-line module). Raises
:class:`~ovserve.export.report.ExportError` for an impossible combination of arguments or an
unknown or non-compression ``--extra_quantization_params`` option.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ovserve.export.report import ExportError, stage
from ovserve.export.repository import GraphOptions
from ovserve.json_types import JsonObject
from ovserve.parsers import PARSER_OFF, REASONING_PARSERS, TOOL_PARSERS
from ovserve.settings.graph import PIPELINE_TYPES

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
NPU_QUANTIZATION_PARAMS = "--sym --ratio 1.0 --group-size -1"


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def add_export_arguments(parser: argparse.ArgumentParser) -> Any:
    """The ``text_generation`` subcommand with OVMS export_model.py's argument names; returns the
    subcommands (``ovserve.export.retrieval`` adds its own to them)."""
    tasks = parser.add_subparsers(dest="task", required=True)
    text = tasks.add_parser(
        "text_generation",
        help="export an LLM or VLM for the chat/completions endpoints",
        description="Export a Hugging Face LLM or VLM to OpenVINO IR and add it to an OVMS model repository.",
    )
    text.add_argument("--source_model", required=True, help="Hugging Face model id, or a local checkpoint directory")
    text.add_argument("--model_name", help="name clients send as 'model' (default: the id, or the directory's name)")
    text.add_argument("--model_repository_path", type=Path, default=Path("models"), help="repository root (models)")
    text.add_argument(
        "--config_file_path", type=Path, help="config.json to add the model to (default: MODEL_REPOSITORY/config.json)"
    )
    text.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS, default="int8")
    text.add_argument("--target_device", default="CPU", help="CPU, GPU or NPU (NPU: int4 symmetric weights)")
    text.add_argument(
        "--extra_quantization_params",
        help='optimum-cli compression options, e.g. "--sym --group-size 128 --ratio 0.8" (int8/int4 only)',
    )
    text.add_argument("--ov_cache_dir", help="OpenVINO compilation cache directory (plugin_config CACHE_DIR)")
    text.add_argument("--overwrite_models", action="store_true", help="replace an existing model directory")
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
    text.add_argument("--max_num_batched_tokens", type=_non_negative_int)
    text.add_argument("--max_num_seqs", type=_non_negative_int, default=256)
    text.add_argument("--cache_size", type=_non_negative_int, default=10, help="KV cache in GB (0: grow on demand)")
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
    return tasks


@dataclass(frozen=True)
class ExportPlan:
    """Everything decided from the arguments before any heavy work starts."""

    source: str
    model_name: str
    repository: Path
    config_path: Path
    weight_format: str
    quantization_params: list[str]
    draft_source: str | None
    graph: GraphOptions
    overwrite: bool

    @property
    def model_dir(self) -> Path:
        return self.repository / self.model_name


def _is_local(source: str) -> bool:
    return Path(source).expanduser().is_dir()


def _default_name(source: str) -> str:
    # A Hub id names the model as OVMS does ("Qwen/Qwen2.5-0.5B-Instruct"); a directory by its name.
    return Path(source).expanduser().resolve().name if _is_local(source) else source


def _check_model_name(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or any(part in {"..", "."} for part in parts):
        raise ExportError(f"--model_name {name!r} must be a relative name such as 'Qwen/Qwen2.5-0.5B-Instruct'")
    return "/".join(parts)


def _check_source(option: str, source: str) -> None:
    # Hub ids contain "/" too; only what can only be a path is reported as a missing directory.
    if source.startswith(("/", ".", "~")) and not _is_local(source):
        raise ExportError(f"{option} {source}: no such directory")


def plan_from_args(args: argparse.Namespace) -> ExportPlan:
    """Resolve defaults and refuse impossible combinations; touches nothing on disk."""
    _check_source("--source_model", args.source_model)
    if args.draft_source_model:
        _check_source("--draft_source_model", args.draft_source_model)
    model_name = _check_model_name(args.model_name or _default_name(args.source_model))
    repository = args.model_repository_path.expanduser().resolve()
    config_path = (args.config_file_path or repository / "config.json").expanduser().resolve()

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
    if extra and weight_format not in {"int8", "int4"}:
        raise ExportError(f"--extra_quantization_params apply to int8 and int4 weights, not {weight_format}")
    quantization_params = shlex.split(extra) if extra else []
    parse_compression_options(weight_format, quantization_params)

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
        if "'" in args.ov_cache_dir:
            raise ExportError("--ov_cache_dir may not contain a single quote (graph.pbtxt quotes plugin_config with ')")
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
        draft_dir_name = (draft_name or _default_name(draft_source)).replace("/", "-")
        _check_model_name(draft_dir_name)
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
    return ExportPlan(
        source=args.source_model,
        model_name=model_name,
        repository=repository,
        config_path=config_path,
        weight_format=weight_format,
        quantization_params=quantization_params,
        draft_source=draft_source,
        graph=graph,
        overwrite=args.overwrite_models,
    )


class _OptimumArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit(2)
        raise ExportError(f"--extra_quantization_params: {message}")


# optimum-cli's options that shape weight compression (the ones its no_compression_parameter_provided
# looks at, plus the statistics cache); anything else there (--task, --library, ...) is export plumbing
# this command decides itself.
COMPRESSION_OPTIONS = {
    "ratio", "group_size", "sym", "all_layers", "dataset", "num_samples", "awq", "scale_estimation", "gptq",
    "lora_correction", "sensitivity_metric", "backup_precision", "group_size_fallback", "quantization_statistics_path",
}  # fmt: skip


def parse_compression_options(weight_format: str, params: list[str], model: str = "model") -> argparse.Namespace:
    """``--extra_quantization_params`` through optimum-cli's own option parser (a cheap import), so
    they mean exactly what they mean to optimum-cli and mistakes surface before the export starts."""
    from optimum.commands.export.openvino import parse_args_openvino

    parser = _OptimumArgumentParser(prog="optimum-cli export openvino", add_help=False)
    parse_args_openvino(parser)
    args = parser.parse_args(["--model", model, "--weight-format", weight_format, *params, "unused-output"])
    defaults = parser.parse_args(["--model", model, "--weight-format", weight_format, "unused-output"])
    for action in parser._actions:
        if action.dest not in COMPRESSION_OPTIONS and getattr(args, action.dest) != getattr(defaults, action.dest):
            raise ExportError(
                f"--extra_quantization_params: {action.option_strings[-1]} is not a weight compression option"
            )
    return args
