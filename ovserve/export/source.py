"""The checkpoint to export: where it is, whether it has a tokenizer, and whether the disk can hold it.

Takes ``--source_model`` as given: a local directory, or a Hugging Face Hub id looked up online or,
offline or unreachable, in the local Hub cache (:func:`resolve_source`). Returns a :class:`Source`
listing the checkpoint's files and sizes, without downloading any weights (single small files such
as config.json are fetched on demand by :meth:`Source.fetch`). :func:`check_tokenizer` and
:func:`check_disk` are the cheap checks run before optimum-intel is imported; the disk estimate
covers the peak of one export (the floating-point IR next to its compressed copy) and, for a Hub
download, the space the Hugging Face cache needs.

Raises :class:`~ovserve.export.report.ExportError` for a source that cannot be found or used (not a
directory nor a Hub id, gated, not cached while offline, no weights, no tokenizer, no config.json)
and for too little disk space. Imports only huggingface_hub (and httpx), never torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ovserve.export.report import ExportError, gb, stage
from ovserve.export.repository import existing_ancestor
from ovserve.json_types import JsonObject, json_object

# Bytes per exported weight, and per checkpoint weight by the config's dtype (unknown: 2, which
# overestimates the parameter count of a float32 checkpoint rather than underestimating it).
BYTES_PER_WEIGHT = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}
CHECKPOINT_BYTES_PER_WEIGHT = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
DISK_MARGIN_BYTES = 256 * 1024**2
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")

# Files that hold a tokenizer the openvino_tokenizers converter can read.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "spm_char.model", "qwen.tiktoken"
)  # fmt: skip


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

    def config(self) -> JsonObject:
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
    """The weights optimum reads: a transformers checkpoint's at its root; a diffusers pipeline's
    (``model_index.json`` at its root) in its component folders, without the variants diffusers
    loads only when asked (``x.fp16.safetensors``) or the single-file checkpoints some keep at the root."""
    if "model_index.json" not in files:
        return _folder_weights({name: size for name, size in files.items() if "/" not in name})
    components: dict[str, dict[str, int]] = {}
    for name, size in files.items():
        folder, sep, base = name.partition("/")
        if sep and "/" not in base and base.count(".") == 1:
            components.setdefault(folder, {})[base] = size
    return sum(_folder_weights(component) for component in components.values())


def _folder_weights(files: dict[str, int]) -> int:
    # optimum loads safetensors when present, else the PyTorch pickles; never both.
    for suffixes in ((".safetensors",), WEIGHT_SUFFIXES[1:]):
        total = sum(size for name, size in files.items() if name.endswith(suffixes))
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


def _checkpoint_dtype_bytes(config: JsonObject) -> float:
    for holder in (config, json_object(config.get("text_config"))):
        dtype = holder.get("torch_dtype") or holder.get("dtype")
        if dtype in CHECKPOINT_BYTES_PER_WEIGHT:
            return CHECKPOINT_BYTES_PER_WEIGHT[dtype]
    return 2.0


def estimate_export_bytes(weights_bytes: int, config: JsonObject, weight_format: str) -> int:
    """Peak disk use of one export: the IR at the target precision, plus for int8/int4 the
    floating-point IR main_export writes before nncf compresses it next to it."""
    parameters = weights_bytes / _checkpoint_dtype_bytes(config)
    peak = parameters * BYTES_PER_WEIGHT[weight_format]
    if weight_format in {"int8", "int4"}:
        peak += weights_bytes
    return int(peak)


def check_disk(target: Path, weight_format: str, sources: list[tuple[Source, JsonObject]]) -> None:
    """Refuse an export of ``sources`` (each with its config) into ``target`` that the disk cannot hold."""
    needed = DISK_MARGIN_BYTES
    downloads = 0
    for source, config in sources:
        needed += estimate_export_bytes(_weights_bytes(source.files), config, weight_format)
        downloads += source.download_bytes
    where = existing_ancestor(target.parent)
    free = shutil.disk_usage(where).free
    stage(f"disk: the export needs about {gb(needed)} ({weight_format}), {gb(free)} free in {where}")
    if needed > free:
        raise ExportError(
            f"not enough disk space in {where}: exporting at {weight_format} needs about {gb(needed)}, "
            f"{gb(free)} are free; free some space or choose a smaller --weight-format"
        )
    if downloads:
        from huggingface_hub import constants

        cache = existing_ancestor(Path(constants.HF_HUB_CACHE))
        cache_free = shutil.disk_usage(cache).free
        # On one filesystem the download and the export share the free space.
        if os.stat(cache).st_dev == os.stat(where).st_dev:
            cache_free -= needed
        if downloads > cache_free:
            raise ExportError(
                f"not enough disk space for the download: the checkpoint is {gb(downloads)}, "
                f"{gb(max(cache_free, 0))} are left in {cache} (HF_HUB_CACHE)"
            )


def template_in_source(source: Source) -> bool:
    """Whether the checkpoint has a chat template (its own file, or in tokenizer_config.json)."""
    if "chat_template.jinja" in source.files or "chat_template.json" in source.files:
        return True
    path = source.fetch("tokenizer_config.json")
    if path is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(path.read_text(encoding="utf-8")).get("chat_template"))
    return False
