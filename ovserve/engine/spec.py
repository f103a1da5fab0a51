"""What an engine process needs to build its pipeline; plain data, pickled to the child."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SchedulerSettings:
    """``openvino_genai.SchedulerConfig`` fields, with OVMS's graph defaults."""

    cache_size: int = 0  # GB of KV cache; 0 lets the engine grow it on demand
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 256
    dynamic_split_fuse: bool = True
    enable_prefix_caching: bool = False


@dataclass(frozen=True)
class EngineSpec:
    name: str
    model_path: Path
    device: str = "CPU"
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    plugin_config: dict[str, Any] = field(default_factory=dict)
    draft_models_path: Path | None = None
    draft_device: str | None = None
