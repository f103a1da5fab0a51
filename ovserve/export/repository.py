"""Writing the OVMS model repository: graph.pbtxt, the model directory, config.json.

Takes the graph options decided from the arguments (:class:`GraphOptions`), a staging directory
holding a finished export, and the repository's ``config.json`` path. Guarantees:

- :func:`render_graph` writes graph.pbtxt byte for byte as OVMS's ``export_model.py`` template does;
- :func:`staging_directory` stages next to the target (same filesystem, so the swap is a rename)
  and on exit removes the staging directory and any parent directories it had to create, so a
  failed export leaves the repository as it was;
- :func:`swap_into_place` never leaves the target missing: the old model is moved aside and back
  if the new one cannot take its place;
- :func:`add_servable` replaces ``config.json`` atomically (temporary file and rename, indent 4 as
  OVMS), under a lock so exports running at once into one repository keep each other's entries.

Raises :class:`~ovserve.export.report.ExportError` for a ``config.json`` that is not usable and
for a target that overlaps the checkpoint; OSError from the filesystem passes through.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ovserve.export.report import ExportError
from ovserve.json_types import JsonObject

STAGING_PREFIX = ".ovserve-export-"


@dataclass(frozen=True)
class GraphOptions:
    """The LLM node options export_model.py puts in graph.pbtxt, with its defaults."""

    target_device: str = "CPU"
    pipeline_type: str | None = None
    plugin_config: JsonObject = field(default_factory=dict)
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
# A node with a LOOPBACK back edge (the LLM and speech-to-text calculators) syncs its inputs so.
LOOPBACK_INPUT_HANDLER = """
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
_GRAPH_TAIL = "\n      }\n  }" + LOOPBACK_INPUT_HANDLER + "\n}"


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


def check_target_free(target: Path, overwrite: bool, config_path: Path) -> None:
    """Before any work: the model directory is free (or ``overwrite``) and config.json is usable."""
    if target.exists() and not overwrite:
        raise ExportError(f"{target} already exists; pass --overwrite_models to replace it (nothing was changed)")
    read_repository_config(config_path)


def read_repository_config(config_path: Path) -> JsonObject:
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
    assert isinstance(entries, list)  # read_repository_config refuses any other kind
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


def existing_ancestor(path: Path) -> Path:
    """``path``, or its nearest parent that exists."""
    while not path.exists():
        path = path.parent
    return path


def check_not_overlapping(local: Path | None, target: Path) -> None:
    """Refuse a target that holds, or lies inside, the local checkpoint directory ``local``."""
    # Replacing the target must not delete the checkpoint being exported.
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


def swap_into_place(staged: Path, target: Path, aside: Path) -> None:
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


@contextlib.contextmanager
def staging_directory(target: Path) -> Iterator[Path]:
    """A fresh directory next to ``target``; on exit it is removed, and so are the parents created
    for it that are then empty."""
    # Directories this run creates (e.g. models/Qwen/) are removed again if the export fails.
    created = existing_ancestor(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{target.name}-", dir=target.parent))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty_parents(target.parent, created)


def write_graph(directory: Path, options: GraphOptions) -> Path:
    """Write ``directory/graph.pbtxt``; returns its path."""
    graph_path = directory / "graph.pbtxt"
    graph_path.write_text(render_graph(options), encoding="utf-8")
    return graph_path
