"""A model's own sampling defaults: the ``generation_config.json`` of its directory (or the file a
graph names). Read once at load; :mod:`ovserve.core.generation_config` applies them between the
request's values and the built-in ones."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# generation_config.json keys ovserve honours, by the name used in GenerationParams.
_MODEL_DEFAULT_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "length_penalty",
    "max_new_tokens",
    "num_assistant_tokens",
    "assistant_confidence_threshold",
    "max_ngram_size",
)


@dataclass(frozen=True)
class ModelDefaults:
    """The sampling defaults a model directory ships in ``generation_config.json``."""

    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, model_dir: Path, path: Path | None = None) -> ModelDefaults:
        """Read ``path`` (a graph's generation_config_path) or ``model_dir/generation_config.json``."""
        path = path or model_dir / "generation_config.json"
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", path, exc)
            return cls()
        values = {key: raw[key] for key in _MODEL_DEFAULT_KEYS if raw.get(key) is not None}
        # HF semantics: do_sample=false means greedy whatever temperature says.
        if raw.get("do_sample") is False:
            values["temperature"] = 0.0
        return cls(values)
