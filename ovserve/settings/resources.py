"""Machine resources in the settings: the memory budget's sizes and OpenVINO's model cache."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ovserve.engine.memory import machine_memory_bytes
from ovserve.json_types import JsonObject

# OpenVINO's model cache: compiled models kept on disk, so that a reload imports instead of
# compiling. OPTIMIZE_SIZE (CPU): the cached blob leaves the weights out and maps them from the
# model's own .bin, so the cache costs megabytes, not a second copy of every model.
CACHE_DIR = "CACHE_DIR"
CACHE_MODE = "CACHE_MODE"


def compile_cache_properties(cache_dir: Path, device: str) -> JsonObject:
    """The OpenVINO properties that turn the model cache on for ``device``."""
    properties: JsonObject = {CACHE_DIR: str(cache_dir)}
    if device.upper() == "CPU":
        properties[CACHE_MODE] = "OPTIMIZE_SIZE"
    return properties


# --cache_dir's default: the user's cache directory (XDG), as the README states it.
DEFAULT_CACHE_DIR = Path("$XDG_CACHE_HOME/ovserve")


def resolve_cache_dir(path: Path) -> Path:
    """``path`` with ``~`` and environment variables expanded; ``$XDG_CACHE_HOME`` is ``~/.cache``
    when the environment does not set it (the XDG base directory specification's default)."""
    environ = {"XDG_CACHE_HOME": str(Path.home() / ".cache"), **os.environ}
    text = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: environ.get(m[1] or m[2], m[0]), str(path))
    return Path(text).expanduser()


_MEMORY_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_memory_size(text: str) -> int:
    """Bytes from ``"1073741824"``, ``"1.5G"``, ``"512MiB"`` (powers of 1024) or ``"60%"`` of the
    machine's memory (its RAM, or its cgroup's limit when lower)."""
    text = text.strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise ValueError(f"{text!r} is not a percentage") from None
        if not 0 < percent <= 100:
            raise ValueError(f"a percentage of the machine's memory must be in (0, 100], got {text!r}")
        total = machine_memory_bytes()
        if total is None:
            raise ValueError("the machine's memory cannot be read here: give the budget in bytes")
        return int(total * percent / 100)
    match = _MEMORY_SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: bytes, with K, M, G or T (powers of 1024), or a percentage")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
