"""Export a Hugging Face model into an OVMS model repository: IR, tokenizer, graph.pbtxt, config.json.

``ovserve export text_generation ...`` and ``scripts/export_model.py text_generation ...`` run this
module. It takes OVMS's ``export_model.py`` argument names and writes what that script writes, so
the repository serves unchanged with ``ovserve serve --config_path`` or with OVMS::

    MODEL_REPOSITORY/config.json             {"mediapipe_config_list": [{"name", "base_path"}], ...}
    MODEL_REPOSITORY/<model_name>/           IR + openvino_{de,}tokenizer + HF configs + graph.pbtxt
    MODEL_REPOSITORY/<model_name>/<draft>/   the draft model (speculative decoding), if any

The steps, each printed as it starts: resolve the source (local directory, or Hub id online or
from the local cache), check it has a tokenizer and that the disk can hold the result, detect the
task from its config (text or image-text-to-text), export with optimum-intel's Python API in a
staging directory next to the target (``main_export`` then nncf weight compression, built from
optimum-cli's own option parser so ``--extra_quantization_params`` mean what they mean there),
restore the checkpoint's tokenizer/generation files, write ``graph.pbtxt`` there and check that
ovserve accepts it, build the pipeline it describes in openvino_genai and generate a token, then
swap the staging directory into place and add or update the ``config.json`` entry. A failure at
any step leaves the repository as it was.

Differences from OVMS's script, on purpose:

- an existing model directory is replaced only with ``--overwrite_models`` (OVMS skips the export
  and rewrites the graph); without it the export is refused and nothing changes;
- for a local source directory the default ``--model_name`` (and the draft's sub-directory name)
  is the directory's name, not the whole path (OVMS would nest the export under the path);
  ``--draft_model_name``, when given, names the draft's sub-directory;
- ``--cache_size 0`` is written as 0 (grow on demand); OVMS's template turns 0 into 10;
- the newer ``tool_parser``/``reasoning_parser`` fields are written, not ``response_parser``, and
  no tuned chat template is downloaded for a tool parser (the model's own template is kept);
- ``config.json`` defaults to ``MODEL_REPOSITORY/config.json`` and is replaced atomically.

torch, transformers and optimum-intel are export-time extras (``pip install ovserve[export]``):
they are imported only once the cheap checks have passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from ovserve.config import ModelSettings
from ovserve.engine.spec import PipelineKind
from ovserve.graph import PIPELINE_TYPES, GraphError, parse_graph
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
NPU_QUANTIZATION_PARAMS = "--sym --ratio 1.0 --group-size -1"

TEXT_TASK = "text-generation-with-past"
VLM_TASK = "image-text-to-text"
OPTIMUM_MODELS_URL = "https://huggingface.co/docs/optimum-intel/openvino/models"

# Bytes per exported weight, and per checkpoint weight by the config's dtype (unknown: 2, which
# overestimates the parameter count of a float32 checkpoint rather than underestimating it).
BYTES_PER_WEIGHT = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}
CHECKPOINT_BYTES_PER_WEIGHT = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
DISK_MARGIN_BYTES = 256 * 1024**2
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")

# Files that hold a tokenizer the openvino_tokenizers converter can read.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "qwen.tiktoken")
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

STAGING_PREFIX = ".ovserve-export-"


class ExportError(Exception):
    """A problem the user can fix: reported as one line, exit status 2, repository unchanged."""


def _stage(message: str) -> None:
    print(f"[export] {message}", flush=True)


def _gb(size: float) -> str:
    return f"{size / 1024**3:.2f} GB"


# -- graph.pbtxt and config.json, as OVMS's export_model.py writes them ---------------------------


@dataclass(frozen=True)
class GraphOptions:
    """The LLM node options export_model.py puts in graph.pbtxt, with its defaults."""

    target_device: str = "CPU"
    pipeline_type: str | None = None
    plugin_config: dict[str, Any] = field(default_factory=dict)
    enable_prefix_caching: bool = False
    cache_size: int = 10
    max_num_batched_tokens: int | None = None
    dynamic_split_fuse: bool = True
    max_num_seqs: int = 256
    draft_dir_name: str | None = None
    reasoning_parser: str | None = None
    tool_parser: str | None = None


_GRAPH_HEAD = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }
  node_options: {
      [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {
"""
_GRAPH_TAIL = """
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


def render_graph(options: GraphOptions) -> str:
    """graph.pbtxt byte for byte as OVMS's template renders it (its spacing quirks included:
    ``enable_prefix_caching:  true`` and ``dynamic_split_fuse: false, ``), so the two tools'
    repositories diff clean."""
    lines = []
    if options.pipeline_type:
        lines.append(f"pipeline_type: {options.pipeline_type},")
    lines.append('models_path: "./",')
    lines.append(f"plugin_config: '{json.dumps(options.plugin_config)}',")
    lines.append("enable_prefix_caching: " + (" true," if options.enable_prefix_caching else "false,"))
    lines.append(f"cache_size: {options.cache_size},")
    if options.max_num_batched_tokens:
        lines.append(f"max_num_batched_tokens: {options.max_num_batched_tokens},")
    if not options.dynamic_split_fuse:
        lines.append("dynamic_split_fuse: false, ")
    lines.append(f"max_num_seqs: {options.max_num_seqs},")
    lines.append(f'device: "{options.target_device}",')
    if options.draft_dir_name:
        lines.append("# Speculative decoding configuration")
        lines.append(f'draft_models_path: "./{options.draft_dir_name}",')
    if options.reasoning_parser:
        lines.append(f'reasoning_parser: "{options.reasoning_parser}",')
    if options.tool_parser:
        lines.append(f'tool_parser: "{options.tool_parser}",')
    return _GRAPH_HEAD + "\n".join(" " * 10 + line for line in lines) + _GRAPH_TAIL


def read_repository_config(config_path: Path) -> dict[str, Any]:
    """The current config.json (an empty OVMS config if there is none); raises ExportError if unusable."""
    if not config_path.exists():
        return {"mediapipe_config_list": [], "model_config_list": []}
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportError(f"{config_path} is not a readable JSON config ({exc}); fix or move it first") from exc
    if not isinstance(data, dict) or not isinstance(data.get("mediapipe_config_list", []), list):
        raise ExportError(f"{config_path}: expected a JSON object whose 'mediapipe_config_list' is a list")
    return data


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise config.json updates of exports running at once into one repository.

    flock on the directory itself: no lock file is left in the repository. Where there is no
    flock (Windows), concurrent exports into one repository are not supported.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def add_servable(config_path: Path, name: str, base_path: str) -> bool:
    """Add ``{"name", "base_path"}`` to mediapipe_config_list, or update the entry with that name.

    Written with indent=4 like OVMS, through a temporary file and a rename so a crash never leaves
    a truncated config, under a lock so concurrent exports keep each other's entries. Returns True
    if the entry already existed.
    """
    config_path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(config_path.parent):
        return _add_servable(config_path, name, base_path)


def _add_servable(config_path: Path, name: str, base_path: str) -> bool:
    data = read_repository_config(config_path)
    entries = data.setdefault("mediapipe_config_list", [])
    existing = [entry for entry in entries if isinstance(entry, dict) and entry.get("name") == name]
    for entry in existing:
        entry["base_path"] = base_path
    if not existing:
        entries.append({"name": name, "base_path": base_path})
    # mkstemp creates the file 0600; keep the old file's mode, or the one open() would give.
    umask = os.umask(0)
    os.umask(umask)
    mode = config_path.stat().st_mode & 0o777 if config_path.exists() else 0o666 & ~umask
    fd, tmp_name = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=config_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp_file:
            json.dump(data, tmp_file, indent=4)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, config_path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return bool(existing)


# -- command line ---------------------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``text_generation`` subcommand with OVMS export_model.py's argument names."""
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
    text.add_argument("--enable_prefix_caching", action="store_true")
    text.add_argument("--disable_dynamic_split_fuse", dest="dynamic_split_fuse", action="store_false")
    text.add_argument("--max_num_batched_tokens", type=_non_negative_int)
    text.add_argument("--max_num_seqs", type=_non_negative_int, default=256)
    text.add_argument("--cache_size", type=_non_negative_int, default=10, help="KV cache in GB (0: grow on demand)")
    text.add_argument("--draft_source_model", help="draft model (Hub id or directory) for speculative decoding")
    text.add_argument("--draft_model_name", help="the draft's sub-directory name (default: from its source)")
    text.add_argument("--max_prompt_len", type=int, help="NPU only: longest prompt in tokens")
    text.add_argument("--prompt_lookup_decoding", action="store_true", help="serve with prompt-lookup decoding")
    # The server's parser registry: a graph naming another parser would not load.
    text.add_argument("--tool_parser", choices=sorted(TOOL_PARSERS), help="default: detected from the chat template")
    text.add_argument("--reasoning_parser", choices=sorted(REASONING_PARSERS))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="export_model.py",
        description="Export a Hugging Face model to an OVMS model repository that ovserve serves.",
    )
    add_export_arguments(parser)
    return parser


# -- what to do -----------------------------------------------------------------------------------


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
            _stage(f"NPU target: weight format {weight_format} -> int4")
            weight_format = "int4"
        if not extra:
            _stage(f"NPU target: quantization parameters {NPU_QUANTIZATION_PARAMS}")
            extra = NPU_QUANTIZATION_PARAMS
    if extra and weight_format not in {"int8", "int4"}:
        raise ExportError(f"--extra_quantization_params apply to int8 and int4 weights, not {weight_format}")
    quantization_params = shlex.split(extra) if extra else []
    parse_compression_options(weight_format, quantization_params)

    plugin_config: dict[str, Any] = {}
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


# -- the source checkpoint ------------------------------------------------------------------------


@dataclass
class Source:
    """A checkpoint to export: a local directory (given, or a Hub cache snapshot), or a Hub id online."""

    id: str
    local_dir: Path | None
    files: dict[str, int]  # relative name -> size in bytes
    download_bytes: int = 0  # what optimum will still fetch into the Hugging Face cache

    @property
    def model_name_or_path(self) -> str:
        # Absolute: optimum-intel treats a relative path that does not start with "./" as a Hub id.
        return str(self.local_dir) if self.local_dir is not None else self.id

    def describe(self) -> str:
        if self.local_dir is None:
            return f"{self.id} (Hugging Face Hub)"
        return str(self.local_dir) if self.id == str(self.local_dir) else f"{self.id} (cached in {self.local_dir})"

    def fetch(self, name: str) -> Path | None:
        """Local path of one of the checkpoint's files, or None if it has no such file."""
        if name not in self.files:
            return None
        if self.local_dir is not None:
            return self.local_dir / name
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(self.id, name))

    def config(self) -> dict[str, Any]:
        path = self.fetch("config.json")
        if path is None:
            raise ExportError(f"{self.describe()} has no config.json: it is not a Hugging Face transformers checkpoint")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ExportError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ExportError(f"{path} is not a JSON object")
        return data


def _local_files(directory: Path) -> dict[str, int]:
    return {
        str(path.relative_to(directory)): path.stat().st_size
        for path in directory.rglob("*")
        if path.is_file() and ".cache" not in path.relative_to(directory).parts
    }


def _offline_advice(model_id: str) -> str:
    return (
        f"download it on a machine with internet (`hf download {model_id} --local-dir DIR`), "
        "copy DIR here and pass --source_model DIR"
    )


def resolve_source(source: str) -> Source:
    """Find the checkpoint without downloading weights: a directory, the Hub, or the local Hub cache."""
    path = Path(source).expanduser()
    if path.is_dir():
        local = path.resolve()
        return Source(id=str(local), local_dir=local, files=_local_files(local))
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(source)
    except HFValidationError:
        raise ExportError(f"--source_model {source}: no such directory, and not a Hugging Face model id") from None

    reason = "downloads are off (HF_HUB_OFFLINE=1)"
    if not constants.HF_HUB_OFFLINE:
        import httpx

        try:
            info = HfApi().model_info(source, files_metadata=True)
        except GatedRepoError:
            raise ExportError(
                f"{source} is gated: accept its license on https://huggingface.co/{source} and log in (`hf auth login`)"
            ) from None
        except RepositoryNotFoundError:
            raise ExportError(
                f"{source}: no such model on the Hugging Face Hub (a private one needs `hf auth login`), "
                "and no such local directory"
            ) from None
        except (OfflineModeIsEnabled, httpx.TransportError) as exc:
            reason = f"the Hugging Face Hub cannot be reached ({exc})"
        else:
            files = {sibling.rfilename: sibling.size or 0 for sibling in info.siblings or []}
            return Source(id=source, local_dir=None, files=files, download_bytes=_weights_bytes(files))
    try:
        cached = Path(snapshot_download(source, local_files_only=True))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise ExportError(
            f"{source} is not a local directory and not in the Hugging Face cache ({constants.HF_HUB_CACHE}), "
            f"and {reason}: {_offline_advice(source)}"
        ) from None
    files = _local_files(cached)
    if not _weights_bytes(files):
        # hf_hub_download of single files (a config, a tokenizer) leaves a snapshot without weights.
        raise ExportError(
            f"the Hugging Face cache holds only part of {source} ({cached} has no weights), "
            f"and {reason}: {_offline_advice(source)}"
        )
    return Source(id=source, local_dir=cached, files=files)


def _weights_bytes(files: dict[str, int]) -> int:
    # optimum loads safetensors when present, else the PyTorch pickles; never both.
    for suffixes in ((".safetensors",), WEIGHT_SUFFIXES[1:]):
        total = sum(size for name, size in files.items() if "/" not in name and name.endswith(suffixes))
        if total:
            return total
    return 0


def check_tokenizer(source: Source) -> None:
    if not any(name in source.files for name in TOKENIZER_FILES) and not any(
        name.endswith(".tiktoken") for name in source.files
    ):
        raise ExportError(
            f"{source.describe()} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): the server needs one; "
            "copy the tokenizer files of the model it was trained from into the checkpoint directory"
        )


def _checkpoint_dtype_bytes(config: dict[str, Any]) -> float:
    for holder in (config, config.get("text_config") or {}):
        dtype = holder.get("torch_dtype") or holder.get("dtype")
        if dtype in CHECKPOINT_BYTES_PER_WEIGHT:
            return CHECKPOINT_BYTES_PER_WEIGHT[dtype]
    return 2.0


def estimate_export_bytes(weights_bytes: int, config: dict[str, Any], weight_format: str) -> int:
    """Peak disk use of one export: the IR at the target precision, plus for int8/int4 the
    floating-point IR main_export writes before nncf compresses it next to it."""
    parameters = weights_bytes / _checkpoint_dtype_bytes(config)
    peak = parameters * BYTES_PER_WEIGHT[weight_format]
    if weight_format in {"int8", "int4"}:
        peak += weights_bytes
    return int(peak)


def _existing_ancestor(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def check_disk(plan: ExportPlan, sources: list[tuple[Source, dict[str, Any]]]) -> None:
    needed = DISK_MARGIN_BYTES
    downloads = 0
    for source, config in sources:
        needed += estimate_export_bytes(_weights_bytes(source.files), config, plan.weight_format)
        downloads += source.download_bytes
    where = _existing_ancestor(plan.model_dir.parent)
    free = shutil.disk_usage(where).free
    _stage(f"disk: the export needs about {_gb(needed)} ({plan.weight_format}), {_gb(free)} free in {where}")
    if needed > free:
        raise ExportError(
            f"not enough disk space in {where}: exporting at {plan.weight_format} needs about {_gb(needed)}, "
            f"{_gb(free)} are free; free some space or choose a smaller --weight-format"
        )
    if downloads:
        from huggingface_hub import constants

        cache = _existing_ancestor(Path(constants.HF_HUB_CACHE))
        cache_free = shutil.disk_usage(cache).free
        # On one filesystem the download and the export share the free space.
        if os.stat(cache).st_dev == os.stat(where).st_dev:
            cache_free -= needed
        if downloads > cache_free:
            raise ExportError(
                f"not enough disk space for the download: the checkpoint is {_gb(downloads)}, "
                f"{_gb(max(cache_free, 0))} are left in {cache} (HF_HUB_CACHE)"
            )


def detect_task(source: Source, config: dict[str, Any]) -> str:
    """text-generation-with-past or image-text-to-text, from the model type optimum-intel registers."""
    from optimum.exporters.openvino import model_configs  # noqa: F401  (registers the OpenVINO export configs)
    from optimum.exporters.tasks import TasksManager

    model_type = str(config.get("model_type") or "")
    architectures = ", ".join(config.get("architectures") or []) or "no architectures listed"
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


# -- optimum-intel ---------------------------------------------------------------------------------


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


def quantization_config(weight_format: str, params: list[str], model_id: str) -> dict[str, Any] | None:
    """The weight-compression config optimum-cli builds for ``--weight-format F PARAMS``: its own
    helpers, so model-specific default configs (tuned int4 settings for known Hub ids) apply too."""
    if weight_format in {"fp16", "fp32"}:
        return None
    from optimum.commands.export.openvino import no_compression_parameter_provided, prepare_wc_config
    from optimum.intel.openvino.configuration import _DEFAULT_4BIT_WQ_CONFIG, get_default_quantization_config

    args = parse_compression_options(weight_format, params, model_id)
    config: dict[str, Any] = prepare_wc_config(args, _DEFAULT_4BIT_WQ_CONFIG)
    if no_compression_parameter_provided(args):
        default = get_default_quantization_config(model_id, weight_format)
        if default is not None:
            _stage(f"using optimum-intel's tuned {weight_format} config for {model_id}: {default}")
            config = default
        elif weight_format == "int4":
            config = dict(_DEFAULT_4BIT_WQ_CONFIG)
    return config


@contextlib.contextmanager
def _export_environment(staging: Path) -> Iterator[None]:
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


def export_ir(source: Source, output: Path, task: str, weight_format: str, compression: Any, label: str) -> None:
    """optimum-cli export openvino --weight-format F PARAMS --trust-remote-code, in-process."""
    from optimum.exporters.openvino import main_export
    from optimum.exporters.openvino.__main__ import _main_quantize
    from optimum.intel import OVConfig
    from optimum.intel.openvino.configuration import _GPTOSSQuantizationConfig

    ov_config = OVConfig(dtype=weight_format) if compression is None else OVConfig(quantization_config=compression)
    common: dict[str, Any] = {
        "model_name_or_path": source.model_name_or_path,
        "task": task,
        "library_name": "transformers",
        # As OVMS's export_model.py: models such as phi3_v or internvl ship their own code.
        "trust_remote_code": True,
    }
    started = time.monotonic()
    _stage(f"{label}: converting {source.describe()} to OpenVINO IR ({task})")
    main_export(
        output=output,
        ov_config=ov_config,
        convert_tokenizer=True,
        local_files_only=source.local_dir is not None,
        **common,
    )
    # As optimum-cli: compress in a second pass unless the config is the GPT-OSS two-pass workaround,
    # which main_export already applied.
    if compression and not isinstance(compression, _GPTOSSQuantizationConfig):
        _stage(f"{label}: compressing weights to {weight_format} (nncf)")
        from huggingface_hub import constants

        _main_quantize(quantization_config=compression, output=output, cache_dir=constants.HF_HUB_CACHE, **common)
    _stage(f"{label}: converted in {time.monotonic() - started:.1f} s")


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

    missing = [name for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml") if not (output / name).exists()]
    if missing:
        raise ExportError(
            f"openvino-tokenizers could not convert the tokenizer of {source.describe()} "
            f"(no {' or '.join(missing)}; optimum's warning above says why)"
        )


def _template_in_source(source: Source) -> bool:
    if "chat_template.jinja" in source.files or "chat_template.json" in source.files:
        return True
    path = source.fetch("tokenizer_config.json")
    if path is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(path.read_text(encoding="utf-8")).get("chat_template"))
    return False


# -- openvino_genai check ---------------------------------------------------------------------------


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

    from ovserve.engine.worker import build_pipeline

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
    _stage(f"check: loading in openvino_genai ({kind} pipeline on CPU) and generating a token")
    tokenizer = openvino_genai.Tokenizer(str(spec.model_path))
    has_template = bool(tokenizer.chat_template)
    if _template_in_source(source) and not has_template:
        raise ExportError(f"the chat template of {source.describe()} did not reach openvino_tokenizer.xml")
    if not has_template:
        _stage("note: the model has no chat template; chat requests need one (this may be a base model)")
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
    _stage(f"check: generated {text!r} in {time.monotonic() - started:.1f} s")


# -- the whole export -------------------------------------------------------------------------------


def ovserve_settings(graph_path: Path, name: str) -> ModelSettings:
    """What ``ovserve serve --config_path`` makes of the graph; ExportError if it would refuse it."""
    try:
        return ModelSettings.from_graph(name, parse_graph(graph_path))
    except GraphError as exc:
        raise ExportError(f"ovserve refuses the written graph: {exc}") from exc
    except ValidationError as exc:
        message = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        raise ExportError(f"ovserve refuses the written graph: {message}") from exc


def _check_not_overlapping(source: Source, target: Path) -> None:
    # Replacing the target must not delete the checkpoint being exported.
    local = source.local_dir
    if local is not None and (local == target or target in local.parents or local in target.parents):
        raise ExportError(
            f"the checkpoint {local} and the export target {target} overlap; "
            "export into another --model_repository_path or --model_name"
        )


def _remove_empty_parents(directory: Path, stop: Path) -> None:
    """Remove ``directory`` and its parents below ``stop`` while they are empty."""
    while directory != stop and stop in directory.parents:
        try:
            directory.rmdir()
        except OSError:  # not empty: a model lives here
            return
        directory = directory.parent


def _swap_into_place(staged: Path, target: Path, aside: Path) -> None:
    """Replace ``target`` by ``staged``; the old directory ends up in ``aside`` (deleted by the caller)."""
    if not target.exists():
        os.replace(staged, target)
        return
    # A rename cannot replace a non-empty directory: move the old model aside first, and back if
    # the second rename fails, so the target is never left missing.
    os.replace(target, aside)
    try:
        os.replace(staged, target)
    except OSError:
        os.replace(aside, target)
        raise


def export_text_generation(plan: ExportPlan) -> None:
    started = time.monotonic()
    target = plan.model_dir
    if target.exists() and not plan.overwrite:
        raise ExportError(f"{target} already exists; pass --overwrite_models to replace it (nothing was changed)")
    read_repository_config(plan.config_path)  # an unusable config.json stops us before the export

    source = resolve_source(plan.source)
    _stage(f"source: {source.describe()}")
    _check_not_overlapping(source, target)
    config = source.config()
    check_tokenizer(source)
    draft: tuple[Source, dict[str, Any]] | None = None
    if plan.draft_source:
        draft_source = resolve_source(plan.draft_source)
        _stage(f"draft source: {draft_source.describe()}")
        _check_not_overlapping(draft_source, target)
        draft = (draft_source, draft_source.config())
        check_tokenizer(draft_source)
    check_disk(plan, [(source, config), *([draft] if draft else [])])

    _stage("loading optimum-intel")
    task = detect_task(source, config)
    _stage(f"model type {config.get('model_type')} -> task {task}")
    if draft is not None and detect_task(*draft) != TEXT_TASK:
        raise ExportError(f"the draft model must be a text model; {draft[0].describe()} is a VLM")
    compression = quantization_config(plan.weight_format, plan.quantization_params, source.id)
    # OVMS exports the draft at the model's weight format, without the extra parameters.
    draft_compression = quantization_config(plan.weight_format, [], draft[0].id) if draft else None

    # Directories this run creates (e.g. models/Qwen/) are removed again if the export fails.
    created = _existing_ancestor(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{target.name}-", dir=target.parent))
    try:
        staged = staging / "model"
        with _export_environment(staging):
            export_ir(source, staged, task, plan.weight_format, compression, "model")
            finalize_export(source, staged, task)
            if draft is not None and plan.graph.draft_dir_name:
                draft_dir = staged / plan.graph.draft_dir_name
                export_ir(draft[0], draft_dir, TEXT_TASK, plan.weight_format, draft_compression, "draft")
                finalize_export(draft[0], draft_dir, TEXT_TASK)
        # The graph goes into the staging directory first: the check builds what the server will
        # build from it, and the repository sees neither unless both are good.
        graph_path = staged / "graph.pbtxt"
        graph_path.write_text(render_graph(plan.graph), encoding="utf-8")
        check_loads(ovserve_settings(graph_path, plan.model_name), task, source)

        _swap_into_place(staged, target, staging / "replaced")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty_parents(target.parent, created)
    _stage(f"wrote {target} and its graph.pbtxt")

    base_path = os.path.relpath(target, plan.config_path.parent)
    updated = add_servable(plan.config_path, plan.model_name, base_path)
    _stage(f"{'updated' if updated else 'added'} '{plan.model_name}' in {plan.config_path}")
    _stage(
        f"done in {time.monotonic() - started:.0f} s; serve it with: "
        f"ovserve serve --config_path {plan.config_path} --port 8000"
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``text_generation`` command; returns the exit status."""
    try:
        plan = plan_from_args(args)
        export_text_generation(plan)
    except ExportError as exc:
        print(f"ovserve export: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("ovserve export: interrupted; the repository was left as it was", file=sys.stderr)
        return 130
    except Exception as exc:
        # Not a mistake the user can fix from a message: keep the traceback for the bug report.
        traceback.print_exc()
        print(f"ovserve export: export failed ({type(exc).__name__}: {exc}); the repository was left as it was",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
