"""What an engine process needs to build its pipeline; plain data, pickled to the child."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    IMAGE_GENERATION = "image_generation"  # openvino_genai's image pipelines (ovserve.engine.images)

    @property
    def continuous_batching(self) -> bool:
        return self in _CONTINUOUS_BATCHING_KINDS

    @property
    def generates(self) -> bool:
        """An LLM (chat and completions), as opposed to a model served one request at a time
        (embeddings, rerank, speech, images)."""
        return self not in _RETRIEVAL_KINDS


# Models run one request at a time by ovserve.engine.retrieval_loop (not LLMs).
_RETRIEVAL_KINDS = frozenset(
    {
        PipelineKind.EMBEDDINGS,
        PipelineKind.RERANK,
        PipelineKind.SPEECH_TO_TEXT,
        PipelineKind.TEXT_TO_SPEECH,
        PipelineKind.IMAGE_GENERATION,
    }
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


Resolution = tuple[int, int]  # (width, height) in pixels


def parse_resolution(value: Any) -> Any:
    """OVMS's ``"WxH"`` (a list of them, separated by spaces or commas, where several are allowed)."""
    if not isinstance(value, str):
        return value
    sizes = []
    for item in value.replace(",", " ").split():
        width, sep, height = item.lower().partition("x")
        if not sep or not width.isdigit() or not height.isdigit() or int(width) < 1 or int(height) < 1:
            raise ValueError(f"expected WIDTHxHEIGHT in pixels (e.g. 512x512), got {item!r}")
        sizes.append((int(width), int(height)))
    return sizes


def parse_named_files(value: str, name: str) -> dict[str, str]:
    """A flag's ``NAME=FILE,NAME=FILE`` (``name`` says what the names are in its complaint)."""
    pairs = [item.strip() for item in value.split(",") if item.strip()]
    if any("=" not in pair for pair in pairs):
        raise ValueError(f"expected {name}=FILE[,{name}=FILE...], got {value!r}")
    return dict(pair.split("=", 1) for pair in pairs)


class LoraAdapter(BaseModel):
    """One LoRA adapter of an image model (OVMS's ``lora_adapters`` entry): its safetensors file
    and the alpha it is applied with unless a request's ``lora_alphas`` says otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    alpha: float = Field(default=1.0, ge=-10.0, le=10.0)


class ImageSettings(BaseModel):
    """How an image-generation model serves (OVMS's ImageGenCalculatorOptions, same names and
    defaults, and ovserve's work bound). Unused by other models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_resolution: Resolution = Field(
        default=(4096, 4096), description="images: the largest WIDTHxHEIGHT a request may ask (OVMS default 4096x4096)"
    )
    default_resolution: Resolution | None = Field(
        default=None, description="images: WIDTHxHEIGHT when a request's size is omitted or auto (default: the model's)"
    )
    max_num_images_per_prompt: int = Field(default=10, ge=1, description="images: the largest n a request may ask")
    default_num_inference_steps: int = Field(default=50, ge=1, description="images: denoising steps when unasked")
    max_num_inference_steps: int = Field(
        default=100, ge=1, description="images: the most denoising steps a request may ask"
    )
    resolution: tuple[Resolution, ...] = Field(
        default=(),
        description="images: static WIDTHxHEIGHT shapes the model is reshaped to (required on NPU; "
        "requests must ask one of them)",
    )
    num_images_per_prompt: int | None = Field(default=None, ge=1, description="images: static n (NPU reshape)")
    guidance_scale: float | None = Field(default=None, ge=0, description="images: static guidance scale (NPU reshape)")
    lora_adapters: dict[str, LoraAdapter] = Field(
        default_factory=dict,
        description="images: LoRA adapters by alias, ALIAS=FILE[,ALIAS=FILE...] (a request names one as its 'model')",
    )
    composite_lora_adapters: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        json_schema_extra={"flag": False},  # a graph's (or config's) only: no flag for a nested mapping
        description="images: mixes of lora_adapters by alias: {alias: {adapter alias: weight}}",
    )
    max_pixel_steps: int = Field(
        default=4 * 1024 * 1024 * 50,
        ge=1,
        description="images: the most work one request may ask, width x height x n x steps (default: four "
        "1024x1024 images of 50 steps); 400 beyond",
    )

    @field_validator("max_resolution", "default_resolution", mode="before")
    @classmethod
    def _one_resolution(cls, value: Any) -> Any:
        sizes = parse_resolution(value)
        if isinstance(value, str) and len(sizes) != 1:
            raise ValueError(f"expected one WIDTHxHEIGHT, got {value!r}")
        return sizes[0] if isinstance(value, str) else value

    @field_validator("resolution", mode="before")
    @classmethod
    def _resolutions(cls, value: Any) -> Any:
        return parse_resolution(value)

    @field_validator("lora_adapters", mode="before")
    @classmethod
    def _adapter_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # the flag: ALIAS=FILE,ALIAS=FILE
            return {alias: {"path": path} for alias, path in parse_named_files(value, "ALIAS").items()}
        return value

    @model_validator(mode="after")
    def _adapters_exist(self) -> ImageSettings:
        for alias, adapter in self.lora_adapters.items():
            if not alias:
                raise ValueError("a LoRA adapter needs an alias")
            if not adapter.path.is_file():
                raise ValueError(f"LoRA adapter '{alias}': {adapter.path} does not exist")
        for alias, components in self.composite_lora_adapters.items():
            if alias in self.lora_adapters:
                raise ValueError(f"composite LoRA adapter '{alias}' has the alias of a LoRA adapter")
            unknown = sorted(set(components) - set(self.lora_adapters))
            if unknown or not components:
                raise ValueError(
                    f"composite LoRA adapter '{alias}' names no adapter or unknown ones ({', '.join(unknown)}); "
                    f"known: {', '.join(sorted(self.lora_adapters)) or 'none'}"
                )
        if self.default_num_inference_steps > self.max_num_inference_steps:
            raise ValueError("default_num_inference_steps is over max_num_inference_steps")
        return self

    def adapter_mix(self, alias: str) -> dict[str, float]:
        """The adapters (alias: alpha) an adapter or composite alias stands for."""
        if alias in self.lora_adapters:
            return {alias: self.lora_adapters[alias].alpha}
        return dict(self.composite_lora_adapters[alias])

    @property
    def aliases(self) -> list[str]:
        """Every name a request's ``model`` may give for an adapter (single or composite)."""
        return [*self.lora_adapters, *self.composite_lora_adapters]


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
    images: ImageSettings = field(default_factory=ImageSettings)
    # Embeddings / rerank: the most tokens one input may have (the pipeline's max_length).
    max_input_tokens: int | None = None
    # Text to speech: voice name -> file of the speaker embedding (raw float32, as OVMS reads it).
    voices: dict[str, Path] = field(default_factory=dict)
    # Speech to text: the pipeline is built for word timestamps (its decoder returns cross-attention).
    word_timestamps: bool = False
    fault: EngineFault | None = None  # tests only; never set from a graph or a flag
