"""``--source_loras``: the LoRA adapters an image-generation export puts into the model directory.

Takes OVMS ``export_model.py``'s syntax, comma-separated entries::

    ALIAS=SOURCE[@FILE][:ALPHA]     an adapter: SOURCE is a Hub id, a local .safetensors file or a
                                    local directory; FILE picks the .safetensors in a repository or
                                    directory (needed when it holds several); ALPHA its strength (1.0)
    SOURCE[@FILE][:ALPHA]           the same, named after SOURCE (the repository's, directory's or file's name)
    ALIAS=@A[:ALPHA]+@B[:ALPHA]...  a composite: adapters A and B (aliases above) mixed

:func:`parse_source_loras` checks the text and nothing else (no file is read, no network);
:func:`resolve_lora` finds an adapter's file: on disk, or on the Hugging Face Hub (one file
downloaded into the Hub cache, or taken from it offline). Each adapter's file is copied to
:meth:`LoraSource.destination` inside the model directory: ``loras/ORG/REPO/FILE`` for a Hub
adapter, as OVMS's script lays it out, ``loras/ALIAS/FILE`` for a local one, so the repository
is self-contained. Raises :class:`~ovserve.export.report.ExportError` for a mistake the user can fix.

Differences from OVMS's script, on purpose: a local file or directory is accepted (OVMS takes Hub
ids only); only the adapter's .safetensors file is fetched, not the whole repository; an alias or a
composite component that names no adapter, a repeated alias, and an alpha out of range are refused
here rather than when the server loads the graph.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ovserve.engine.spec import LoraAdapter
from ovserve.errors import first_complaint
from ovserve.export.report import ExportError

# An alias is a model name clients send; kept to what needs no quoting in a graph or a URL.
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SUFFIX = ".safetensors"


@dataclass(frozen=True)
class LoraSource:
    """One adapter of ``--source_loras``: where its file comes from, and its alpha (None: the graph's default 1.0)."""

    alias: str
    source: str  # a Hub id, or an absolute local path (a file or a directory)
    file: str | None  # the .safetensors in the repository or directory; None: its only one (or the file itself)
    alpha: float | None

    @property
    def local(self) -> bool:
        return Path(self.source).is_absolute()

    def destination(self, file_name: str) -> str:
        """Where the adapter's file goes, relative to the model directory (and to its graph)."""
        folder = self.alias if self.local else self.source
        return f"loras/{folder}/{file_name}"

    def known_file_name(self) -> str | None:
        """The file's name when the arguments say it (a file given, or ``@FILE``), before any lookup."""
        if self.file is not None:
            return self.file
        return Path(self.source).name if self.local and self.source.endswith(_SUFFIX) else None


@dataclass(frozen=True)
class LoraMix:
    """A composite adapter: the adapters it mixes, each with its alpha."""

    alias: str
    components: tuple[tuple[str, float], ...]


def _alpha(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ExportError(f"--source_loras {where}: alpha {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ExportError(f"--source_loras {where}: alpha {text!r} is not a finite number")
    return value


def _split_alpha(text: str, where: str) -> tuple[str, float | None]:
    """``X:ALPHA`` -> (X, ALPHA); a last ':' part that is no number belongs to X, as in OVMS's script."""
    head, sep, tail = text.rpartition(":")
    if not sep:
        return text, None
    try:
        float(tail)
    except ValueError:
        return text, None
    return head, _alpha(tail, where)


def _check_alias(alias: str, entry: str) -> str:
    if not _ALIAS.fullmatch(alias):
        raise ExportError(
            f"--source_loras {entry!r}: alias {alias!r} must be letters, digits, '_', '.' and '-' "
            "(it is the model name clients send)"
        )
    return alias


def _mix(alias: str, text: str, entry: str) -> LoraMix:
    components = []
    for token in text.split("+"):
        reference, alpha = _split_alpha(token.strip().removeprefix("@"), entry)
        if not reference:
            raise ExportError(f"--source_loras {entry!r}: a composite lists adapters as @ALIAS[:ALPHA]+@ALIAS[:ALPHA]")
        components.append((reference, 1.0 if alpha is None else alpha))
    return LoraMix(alias, tuple(components))


def _adapter(alias: str | None, text: str, entry: str) -> LoraSource:
    source, alpha = _split_alpha(text, entry)
    file = None
    path = Path(source).expanduser()
    if not path.exists() and "@" in source:
        source, file = source.rsplit("@", 1)
        path = Path(source).expanduser()
        if not file.endswith(_SUFFIX) or "/" in file:
            raise ExportError(f"--source_loras {entry!r}: @{file} must name a {_SUFFIX} file of the adapter")
    if not source:
        raise ExportError(f"--source_loras {entry!r}: no adapter source")
    if path.exists():
        if path.is_file() and file is not None:
            raise ExportError(f"--source_loras {entry!r}: {path} is a file; @FILE picks a file in a directory")
        if path.is_file() and path.suffix != _SUFFIX:
            raise ExportError(f"--source_loras {entry!r}: {path} is not a {_SUFFIX} file")
        source = str(path.resolve())
    elif source.startswith(("/", ".", "~")) or source.endswith(_SUFFIX):
        raise ExportError(f"--source_loras {entry!r}: {source}: no such file or directory")
    if alias is None:
        alias = Path(source).stem if source.endswith(_SUFFIX) else source.rstrip("/").rsplit("/", 1)[-1]
    if alpha is not None:
        try:
            LoraAdapter(path=Path(source), alpha=alpha)  # the server's bounds on an adapter's alpha
        except ValidationError as exc:
            raise ExportError(f"--source_loras {entry!r}: alpha {first_complaint(exc).message}") from None
    return LoraSource(_check_alias(alias, entry), source, file, alpha)


def parse_source_loras(text: str | None) -> tuple[tuple[LoraSource, ...], tuple[LoraMix, ...]]:
    """The adapters and composites of ``--source_loras`` (see the module doc), checked against each other."""
    adapters: list[LoraSource] = []
    mixes: list[LoraMix] = []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        alias, sep, source = entry.partition("=")
        if sep and source.startswith("@"):
            mixes.append(_mix(_check_alias(alias, entry), source, entry))
        else:
            adapters.append(_adapter(alias if sep else None, source if sep else entry, entry))
    aliases = [adapter.alias for adapter in adapters] + [mix.alias for mix in mixes]
    repeated = sorted({alias for alias in aliases if aliases.count(alias) > 1})
    if repeated:
        raise ExportError(f"--source_loras: alias {', '.join(repeated)} given more than once")
    known = {adapter.alias for adapter in adapters}
    for mix in mixes:
        unknown = [reference for reference, _ in mix.components if reference not in known]
        if unknown:
            raise ExportError(
                f"--source_loras: composite '{mix.alias}' names {', '.join(unknown)}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not an adapter alias ({', '.join(sorted(known)) or 'none'})"
            )
    return tuple(adapters), tuple(mixes)


def resolve_lora(adapter: LoraSource) -> Path:
    """The adapter's .safetensors file on this machine (a Hub adapter downloaded into, or found in, the Hub cache)."""
    if adapter.local:
        path = Path(adapter.source)
        if path.is_file():
            return path
        names = [adapter.file] if adapter.file else sorted(item.name for item in path.glob(f"*{_SUFFIX}"))
        file = _one_file(adapter, names, path)
        if not (path / file).is_file():
            raise ExportError(f"LoRA adapter '{adapter.alias}': {path / file}: no such file")
        return path / file
    return _hub_file(adapter)


def _one_file(adapter: LoraSource, names: list[str], where: object) -> str:
    if not names:
        raise ExportError(f"LoRA adapter '{adapter.alias}': {where} holds no {_SUFFIX} file")
    if len(names) > 1:
        raise ExportError(
            f"LoRA adapter '{adapter.alias}': {where} holds several {_SUFFIX} files ({', '.join(names)}); "
            f"pick one with {adapter.alias}={adapter.source}@FILE"
        )
    return names[0]


def _hub_file(adapter: LoraSource) -> Path:
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    where = f"{adapter.source} (Hugging Face Hub)"
    try:
        file = adapter.file
        if file is None:
            if constants.HF_HUB_OFFLINE:
                snapshot = Path(snapshot_download(adapter.source, local_files_only=True))
                names = sorted(item.name for item in snapshot.glob(f"*{_SUFFIX}"))
            else:
                names = sorted(name for name in HfApi().list_repo_files(adapter.source) if "/" not in name
                               and name.endswith(_SUFFIX))  # fmt: skip
            file = _one_file(adapter, names, where)
        return Path(hf_hub_download(adapter.source, file))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise ExportError(
            f"LoRA adapter '{adapter.alias}': {adapter.source} is not a local path and not in the Hugging Face "
            f"cache ({constants.HF_HUB_CACHE}), and the Hub cannot be reached: download the file where there is "
            f"internet and pass {adapter.alias}=PATH/TO/FILE{_SUFFIX}"
        ) from None
    except GatedRepoError:
        raise ExportError(
            f"LoRA adapter '{adapter.alias}': {adapter.source} is gated: log in (`hf auth login`)"
        ) from None
    except (RepositoryNotFoundError, HFValidationError):
        raise ExportError(
            f"LoRA adapter '{adapter.alias}': {adapter.source}: no such model on the Hugging Face Hub, "
            "and no such local file or directory"
        ) from None
    except EntryNotFoundError:
        raise ExportError(f"LoRA adapter '{adapter.alias}': {where} has no file {adapter.file}") from None
