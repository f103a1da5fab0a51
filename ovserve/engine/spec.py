"""What an engine process needs to build its pipeline; plain data, pickled to the child."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ovserve.json_types import JsonObject

# The file that makes a model directory a VLM (openvino_genai's layout): its prompts are never
# token ids. Here, at the bottom of the imports, for the engine and the server alike.
VISION_ENCODER_FILE = "openvino_vision_embeddings_model.xml"


class PipelineKind(enum.Enum):
    CONTINUOUS_BATCHING = "continuous_batching"
    SPECULATIVE = "speculative"  # continuous batching with a draft model
    PROMPT_LOOKUP = "prompt_lookup"  # continuous batching drafting from the prompt's n-grams
    STATEFUL = "stateful"  # openvino_genai.LLMPipeline: one generation at a time (NPU)
    EMBEDDINGS = "embeddings"  # openvino_genai.TextEmbeddingPipeline
    RERANK = "rerank"  # a cross-encoder, driven by ovserve.engine.retrieval
    SPEECH_TO_TEXT = "speech_to_text"  # openvino_genai.WhisperPipeline (ovserve.engine.speech)
    TEXT_TO_SPEECH = "text_to_speech"  # openvino_genai.Text2SpeechPipeline (ovserve.engine.speech)

    @property
    def continuous_batching(self) -> bool:
        return self in _CONTINUOUS_BATCHING_KINDS

    @property
    def generates(self) -> bool:
        """An LLM (chat and completions), as opposed to a retrieval model (embeddings, rerank)."""
        return self not in _RETRIEVAL_KINDS


# Models run one request at a time by ovserve.engine.retrieval_loop (not LLMs).
_RETRIEVAL_KINDS = frozenset(
    {PipelineKind.EMBEDDINGS, PipelineKind.RERANK, PipelineKind.SPEECH_TO_TEXT, PipelineKind.TEXT_TO_SPEECH}
)
_CONTINUOUS_BATCHING_KINDS = frozenset(
    {PipelineKind.CONTINUOUS_BATCHING, PipelineKind.SPECULATIVE, PipelineKind.PROMPT_LOOKUP}
)

Pooling = Literal["CLS", "LAST", "MEAN"]


class RetrievalSettings(BaseModel):
    """How an embeddings or rerank model runs (OVMS's EmbeddingsCalculatorOV / RerankCalculatorOV
    options, and ovserve's batch limits). Unused by LLMs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    normalize_embeddings: bool = Field(default=True, description="embeddings: L2-normalise every vector")
    pooling: Pooling = Field(default="CLS", description="embeddings: how token states become one vector")
    truncate: bool = Field(
        default=False,
        description="embeddings: cut inputs longer than the model's limit instead of refusing them (400)",
    )
    max_position_embeddings: int | None = Field(
        default=None, ge=1, description="embeddings/rerank: the most tokens an input may have (default: config.json)"
    )
    matryoshka_embeddings: bool = Field(
        default=False,
        description="embeddings: the model was trained for shortened vectors (Matryoshka, e.g. Qwen3-Embedding), "
        "so requests may ask for fewer 'dimensions'",
    )
    max_allowed_chunks: int = Field(
        default=10_000,
        ge=1,
        description="embeddings/rerank: most inputs (or documents) one request may carry; beyond it a 400",
    )
    embeddings_batch_size: int = Field(
        default=32,
        ge=1,
        description="embeddings/rerank: most inputs per pipeline call; a longer request is split (bounds the "
        "engine's memory and lets a cancel take effect between calls)",
    )


class SchedulerSettings(BaseModel):
    """``openvino_genai.SchedulerConfig`` fields, with OVMS's graph defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cache_size: int = Field(default=0, ge=0, description="KV cache in GB; 0 grows on demand")
    max_num_seqs: int = Field(default=256, ge=1, description="most sequences scheduled in one step")
    max_num_batched_tokens: int = Field(default=256, ge=1, description="most tokens processed in one step")
    dynamic_split_fuse: bool = Field(
        default=True, description="split long prompts across steps, batched with generating sequences"
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description="reuse the KV cache of prompts' common prefixes (chat clients resend their history every turn); "
        "a graph that omits it: false, as in OVMS",
    )

    @model_validator(mode="after")
    def _fits_the_scheduler(self) -> SchedulerSettings:
        # The engine checks this only inside step(), failing every request: refuse it at startup.
        if not self.dynamic_split_fuse and self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs}) when dynamic_split_fuse is off"
            )
        return self


# The environment variable that turns on :class:`EngineFault` (tests set it on a server process).
FAULT_ENV = "OVSERVE_TEST_FAIL_STEP_ON_MAX_TOKENS"
STALL_ENV = "OVSERVE_TEST_STALL_STEP_ON_MAX_TOKENS"
SLOW_ADMISSION_ENV = "OVSERVE_TEST_SLOW_ADMISSION_ON_MAX_TOKENS"
SLOW_STEP_ENV = "OVSERVE_TEST_SLOW_STEP_ON_MAX_TOKENS"
BUSY_STEP_ENV = "OVSERVE_TEST_BUSY_STEP_ON_MAX_TOKENS"
BUSY_STEP_SECONDS_ENV = "OVSERVE_TEST_BUSY_STEP_SECONDS"


SLOW_ADMISSION_S = 1.5
SLOW_STEP_S = 0.05
BUSY_STEP_S = 10.0


@dataclass(frozen=True)
class EngineFault:
    """Faults injected into the engine loop, for tests: failures the real engine cannot produce
    on demand. 0 means "off".

    ``fail_step_on_max_new_tokens``: after a request whose ``max_new_tokens`` equals this value
    is added, the next ``step()`` raises, as a real engine failure would.
    ``stall_step_on_max_new_tokens``: after such a request, the next ``step()`` never returns,
    as a hung engine (OVMS #4503) would; the server's stall watchdog must notice.
    ``slow_admission_on_max_new_tokens``: a VLM request with this ``max_new_tokens`` takes
    :data:`SLOW_ADMISSION_S` longer to add, as a large image's vision encoder would (the tiny
    test VLM encodes in milliseconds).
    ``slow_step_on_max_new_tokens``: while such a request runs, every ``step()`` takes
    :data:`SLOW_STEP_S` longer, as a large model's would (the tiny test model may finish a long
    generation before a deadline a test set).
    ``busy_step_on_max_new_tokens``: after such a request, the next ``step()`` first works for
    ``busy_step_seconds`` (wall clock), burning CPU on the stepping thread without a word, as a
    long prefill on a loaded machine does; the watchdog must leave it alone (or, past
    ``--engine_step_timeout``, take it for a step that spins).
    """

    fail_step_on_max_new_tokens: int = 0
    stall_step_on_max_new_tokens: int = 0
    slow_admission_on_max_new_tokens: int = 0
    slow_step_on_max_new_tokens: int = 0
    busy_step_on_max_new_tokens: int = 0
    busy_step_seconds: float = BUSY_STEP_S

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> EngineFault | None:
        """The faults the ``OVSERVE_TEST_*`` variables above ask for (e.g. ``=777``)."""
        fault = cls(
            fail_step_on_max_new_tokens=int(environ.get(FAULT_ENV, "0") or 0),
            stall_step_on_max_new_tokens=int(environ.get(STALL_ENV, "0") or 0),
            slow_admission_on_max_new_tokens=int(environ.get(SLOW_ADMISSION_ENV, "0") or 0),
            slow_step_on_max_new_tokens=int(environ.get(SLOW_STEP_ENV, "0") or 0),
            busy_step_on_max_new_tokens=int(environ.get(BUSY_STEP_ENV, "0") or 0),
            busy_step_seconds=float(environ.get(BUSY_STEP_SECONDS_ENV, "") or BUSY_STEP_S),
        )
        return fault if fault != cls() else None


@dataclass(frozen=True)
class EngineSpec:
    name: str
    model_path: Path
    device: str = "CPU"
    kind: PipelineKind = PipelineKind.CONTINUOUS_BATCHING
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    plugin_config: JsonObject = field(default_factory=dict)
    draft_models_path: Path | None = None
    draft_device: str | None = None
    draft_scheduler: SchedulerSettings | None = None
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    # Embeddings / rerank: the most tokens one input may have (the pipeline's max_length).
    max_input_tokens: int | None = None
    # Text to speech: voice name -> file of the speaker embedding (raw float32, as OVMS reads it).
    voices: dict[str, Path] = field(default_factory=dict)
    # Speech to text: the pipeline is built for word timestamps (its decoder returns cross-attention).
    word_timestamps: bool = False
    fault: EngineFault | None = None  # tests only; never set from a graph or a flag
