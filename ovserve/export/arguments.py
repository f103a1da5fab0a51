"""The command-line pieces every export subcommand shares, and their checks.

Takes OVMS ``export_model.py``'s argument names: :func:`add_plan_arguments` adds the options every
task has (source, name, repository, config.json, weight format, device, compression options,
overwrite); each task's module (``ovserve.export.text``, ``.retrieval``, ``.speech``) adds its own.
:func:`compression_params` parses ``--extra_quantization_params`` with optimum-cli's own option
parser (:func:`parse_compression_options`) so they mean what they mean there.

Guarantees: nothing on disk is read or written, beyond checking that a source given as a path is a
directory, and torch is not imported (only optimum's command-line module). Raises
:class:`~ovserve.export.report.ExportError` for an impossible combination of arguments or an
unknown or non-compression ``--extra_quantization_params`` option.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ovserve.cli_types import int_at_least
from ovserve.export.report import ExportError

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")


non_negative_int = int_at_least(0)


def add_task_parser(
    tasks: Any,
    command: str,
    what: str,
    plan_from_args: Callable[[argparse.Namespace], object],
    *,
    alias: str | None = None,
    device_help: str = "CPU, GPU or NPU",
) -> argparse.ArgumentParser:
    """One export subcommand under the subparsers ``tasks`` (``what``: what it exports, for its help),
    with the options every task has; ``args.plan_from_args`` is its task's planner."""
    parser: argparse.ArgumentParser = tasks.add_parser(
        command,
        aliases=[alias] if alias else [],
        help=f"export {what}",
        description=f"Export {what} to OpenVINO IR and add it to an OVMS model repository.",
    )
    parser.set_defaults(plan_from_args=plan_from_args)
    add_plan_arguments(parser, device_help=device_help)
    return parser


def add_plan_arguments(parser: argparse.ArgumentParser, *, device_help: str = "CPU, GPU or NPU") -> None:
    """The options of every export subcommand (what :meth:`ovserve.export.driver.Plan.from_args` reads)."""
    parser.add_argument("--source_model", required=True, help="Hugging Face model id, or a local checkpoint directory")
    parser.add_argument("--model_name", help="name clients send as 'model' (default: the id, or the directory's name)")
    parser.add_argument("--model_repository_path", type=Path, default=Path("models"), help="repository root (models)")
    parser.add_argument(
        "--config_file_path", type=Path, help="config.json to add the model to (default: MODEL_REPOSITORY/config.json)"
    )
    parser.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS, default="int8")
    parser.add_argument("--target_device", default="CPU", help=device_help)
    parser.add_argument(
        "--extra_quantization_params",
        help='optimum-cli compression options, e.g. "--sym --group-size 128 --ratio 0.8" (int8/int4 only)',
    )
    parser.add_argument("--overwrite_models", action="store_true", help="replace an existing model directory")


def add_cache_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ov_cache_dir", help="OpenVINO compilation cache directory (plugin_config CACHE_DIR)")


def check_cache_dir(cache_dir: str | None) -> None:
    if cache_dir and "'" in cache_dir:
        raise ExportError("--ov_cache_dir may not contain a single quote (graph.pbtxt quotes plugin_config with ')")


def _is_local(source: str) -> bool:
    return Path(source).expanduser().is_dir()


def default_name(source: str) -> str:
    # A Hub id names the model as OVMS does ("Qwen/Qwen2.5-0.5B-Instruct"); a directory by its name.
    return Path(source).expanduser().resolve().name if _is_local(source) else source


def check_model_name(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or any(part in {"..", "."} for part in parts):
        raise ExportError(f"--model_name {name!r} must be a relative name such as 'Qwen/Qwen2.5-0.5B-Instruct'")
    return "/".join(parts)


def check_source(option: str, source: str) -> None:
    # Hub ids contain "/" too; only what can only be a path is reported as a missing directory.
    if source.startswith(("/", ".", "~")) and not _is_local(source):
        raise ExportError(f"{option} {source}: no such directory")


def compression_params(weight_format: str, extra: str | None) -> list[str]:
    """``--extra_quantization_params`` split as a shell would, checked against optimum-cli's parser."""
    if extra and weight_format not in {"int8", "int4"}:
        raise ExportError(f"--extra_quantization_params apply to int8 and int4 weights, not {weight_format}")
    params = shlex.split(extra) if extra else []
    parse_compression_options(weight_format, params)
    return params


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
