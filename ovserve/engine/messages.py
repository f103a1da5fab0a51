"""The wire protocol between the server process and an engine process.

One frozen dataclass per message kind; :data:`Command` (server -> engine) and :data:`Event`
(engine -> server) are their unions, and each side dispatches on them with ``match``. The
server sends one command per ``Connection.send``; the engine always sends a *list* of events,
so a busy engine costs one pipe write per step, not one per token.

Every message is a slotted dataclass (small, cheap to pickle) and frozen, except the one sent
per token: :class:`SequenceOutput` is built once per sequence per step on the engine's stepping
thread and again on the server's event loop, and a frozen dataclass's ``__init__`` (one
``object.__setattr__`` per field) measured ~4x slower than a plain one. Nothing mutates it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

# -- payloads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationParams:
    """Fully resolved sampling settings of one request; every field was chosen by someone
    (``ovserve.core.generation_config`` resolves them: request > generation_config.json > built-in)."""

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int  # 0 means "no top-k filter"
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    length_penalty: float
    ignore_eos: bool
    seed: int | None
    stop: tuple[str, ...]
    # Extra stop tokens from the request (the model's EOS ids are the engine's own).
    stop_token_ids: tuple[int, ...]
    # Whether a matched stop string or stop token stays in the text (OVMS: unary false, stream true).
    include_stop: bool
    n: int
    best_of: int
    logprobs: bool
    skip_special_tokens: bool
    num_assistant_tokens: int | None
    assistant_confidence_threshold: float | None
    max_ngram_size: int | None
    # OVMS: best_of > 1 is the beam width; n > 1 at temperature 0 can only come from beams too.
    beam_search: bool
    # Guided generation ({"regex": ...}), set by the chat service from response_format / tools.
    structured_output: dict[str, str] | None = None


@dataclass(slots=True)
class VisionPrompt:
    """A VLM request: a VLM pipeline takes prompt text, not token ids (see ``ovserve.models.vision``).

    ``text`` is the rendered chat with ``<ov_genai_image_N>`` tags; ``images`` are uint8 RGB
    arrays [H, W, 3] in tag order, already shrunk by the server towards the vision encoder's input
    (``ovserve.core.media``), so a message stays small: numpy arrays pickle through the pipe as their
    raw bytes, never a full-size photo.
    """

    text: str
    images: list[np.ndarray]


EnginePrompt = list[int] | VisionPrompt

# One generated token as a client sees it: (token id, token text, log probability).
TokenLogprob = tuple[int, str, float]


class EngineErrorKind(enum.Enum):
    """Why the engine ended a request without finishing it (carried by :class:`RequestEnded`)."""

    ENGINE = "engine"  # step() raised while this request was in flight -> 500, retry
    IGNORED = "ignored"  # the scheduler refused the request (e.g. KV cache too small) -> 503
    REFUSED = "refused"  # add_request refused the request's settings (e.g. a grammar it cannot compile) -> 400


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The engine's own counters, as ``/metrics`` reports them."""

    active_requests: int  # requests the engine loop is driving
    releasing_requests: int  # ended requests whose handles are kept until the pipeline frees them
    engine_requests: int  # the pipeline's get_metrics().requests
    scheduled_requests: int
    cache_usage: float  # fraction of the KV cache in use
    kv_cache_bytes: int = 0  # the KV cache the pipeline has allocated
    # The KV cache's geometry (0: unknown, or no paged cache): tokens per block, and the blocks it
    # holds now (a cache grown on demand grows). What a router's prefix-cache scorer sizes itself by.
    block_size: int = 0
    num_blocks: int = 0


# -- server -> engine -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddRequest:
    request_id: int  # unique across engines and restarts: the pipeline breaks on duplicates
    prompt: EnginePrompt
    params: GenerationParams


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Stop generating; the engine confirms with :class:`RequestEnded` (unless it already ended)."""

    request_id: int


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """Embed ``texts`` (an embeddings engine); answered by :class:`EmbedResult` or an error
    :class:`RequestEnded`. The engine splits them into pipeline calls of its batch size."""

    request_id: int
    texts: list[str]


@dataclass(frozen=True, slots=True)
class RerankRequest:
    """Score every document against ``query`` (a rerank engine); answered by :class:`RerankResult`."""

    request_id: int
    query: str
    documents: list[str]


@dataclass(frozen=True, slots=True)
class TranscribeRequest:
    """Transcribe (or, with ``task`` "translate", translate to English) 16 kHz mono float32
    ``audio`` (a speech-to-text engine). The engine sends :class:`TranscriptDelta` as text comes,
    then :class:`TranscribeResult`, or an error :class:`RequestEnded`."""

    request_id: int
    audio: np.ndarray
    task: str  # "transcribe" or "translate"
    language: str | None  # ISO-639-1 code, or None: detected by the model
    prompt: str | None
    temperature: float
    timestamps: bool  # segment timestamps wanted (verbose_json, srt, vtt)
    words: bool  # word timestamps wanted (an engine loaded with word timestamps only)
    max_new_tokens: int


@dataclass(frozen=True, slots=True)
class SynthesizeRequest:
    """Speak ``text`` (a text-to-speech engine) in ``voice`` (None: the model's default speaker);
    answered, piece by piece in reading order, by a :class:`SpeechPiece` for each piece of the text
    but the last and :class:`SpeechResult` for the last (or an error :class:`RequestEnded`, which
    may come after some pieces)."""

    request_id: int
    text: str
    voice: str | None
    speed: float


@dataclass(frozen=True, slots=True)
class ImageParams:
    """One image request's settings, resolved and checked by the server (``ovserve.core.images``)
    against the model's limits; None: the pipeline's own default (the model's scheduler config)."""

    prompt: str
    width: int
    height: int
    n: int  # num_images_per_prompt
    steps: int  # num_inference_steps
    prompt_2: str | None = None
    prompt_3: str | None = None
    negative_prompt: str | None = None
    negative_prompt_2: str | None = None
    negative_prompt_3: str | None = None
    guidance_scale: float | None = None
    rng_seed: int | None = None
    strength: float | None = None  # edits only: how far the input image is noised (1: fully)
    max_sequence_length: int | None = None
    # The LoRA adapters to apply, (alias, alpha) each; empty: none (every adapter the engine
    # compiled in is switched off).
    adapters: tuple[tuple[str, float], ...] = ()
    output_format: str = "png"  # png, jpeg, webp: the engine encodes
    output_compression: int = 100  # jpeg/webp quality, 0-100
    partial_images: int = 0  # images decoded from the latent at evenly spaced steps, 0-3


@dataclass(frozen=True, slots=True)
class ImageRequest:
    """Generate ``params.n`` images (an image-generation engine): from the prompt alone, from
    ``image`` (uint8 RGB [H, W, 3], the edit's input, already at the output size), or inpainting
    ``image`` where ``mask`` (uint8 [H, W], 255: repaint) is set. The engine sends an
    :class:`ImageProgress` for each partial image asked, then :class:`ImageResult`, or an error
    :class:`RequestEnded`."""

    request_id: int
    params: ImageParams
    image: np.ndarray | None = None
    mask: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class StatsRequest:
    token: int  # echoed by the StatsReply


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Command = (
    AddRequest
    | EmbedRequest
    | RerankRequest
    | TranscribeRequest
    | SynthesizeRequest
    | ImageRequest
    | CancelRequest
    | StatsRequest
    | Shutdown
)


# -- engine -> server -----------------------------------------------------------------------


class LoadStage(enum.Enum):
    """Where an engine's load is (``GET /v3/models``' ``load_stage``), in the order they come."""

    STARTING = "starting"  # the process is spawned and imports its libraries (the client's, at launch)
    COMPILING = "compiling"  # openvino_genai reads the model's files and compiles them (one constructor)
    WARMING_UP = "warming up"  # a first inference and the loop's tables, before any client waits on them


@dataclass(frozen=True, slots=True)
class Loading:
    """The engine entered a stage of its load; sent before :class:`Ready` (or :class:`Fatal`)."""

    stage: LoadStage


@dataclass(frozen=True, slots=True)
class Ready:
    """The pipeline is loaded; requests may come."""

    pid: int


@dataclass(frozen=True, slots=True)
class Fatal:
    """The pipeline could not be built; the engine process exits."""

    message: str


@dataclass(slots=True)  # not frozen: see the module docstring
class SequenceOutput:
    """New text of one sequence (choice) of a request."""

    request_id: int
    index: int  # the choice number, 0..n-1
    text: str
    token_count: int  # generated tokens this output stands for (a trimmed stop token included)
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None  # "stop" / "length" on the sequence's last output
    # On a request's first output only: how many prompt tokens the prefix cache served (the
    # engine's model of it, ovserve.engine.prefix_cache); None when unknown or not the first.
    cached_tokens: int | None = None

    def __reduce__(self) -> tuple[type[SequenceOutput], tuple[object, ...]]:
        # Sent once per token per sequence: a plain tuple of fields pickles smaller and faster
        # than the dataclass's generic slot state.
        fields = (self.request_id, self.index, self.text, self.token_count, self.logprobs, self.finish_reason)
        return (SequenceOutput, fields if self.cached_tokens is None else (*fields, self.cached_tokens))


@dataclass(frozen=True, slots=True)
class RequestEnded:
    """The engine released the request (finished, cancelled or failed); nothing follows for it."""

    request_id: int
    error: EngineErrorKind | None = None
    message: str | None = None  # what the client is told when ``error`` is set


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """The embeddings of an :class:`EmbedRequest`: float32 [len(texts), dim], in input order
    (pickled as raw bytes). Ends the request; no RequestEnded follows."""

    request_id: int
    vectors: np.ndarray


@dataclass(frozen=True, slots=True)
class RerankResult:
    """The relevance score of each document of a :class:`RerankRequest`, in document order.
    Ends the request; no RequestEnded follows."""

    request_id: int
    scores: list[float]


@dataclass(frozen=True, slots=True)
class TranscriptDelta:
    """Text of a :class:`TranscribeRequest` as the model writes it (the stream's deltas)."""

    request_id: int
    text: str


@dataclass(frozen=True, slots=True)
class TranscribeResult:
    """The whole transcript of a :class:`TranscribeRequest`; ``segments`` are (start s, end s, text),
    empty unless timestamps were asked; ``words`` are (start s, end s, word), empty unless word
    timestamps were asked. Ends the request; no RequestEnded follows."""

    request_id: int
    text: str
    segments: list[tuple[float, float, str]]
    words: list[tuple[float, float, str]]
    language: str | None


@dataclass(frozen=True, slots=True)
class SpeechPiece:
    """The speech of one piece of a :class:`SynthesizeRequest`'s text, not the last: float32 mono
    samples at ``sample_rate``, the pause before it included (played in order, the pieces and the
    final :class:`SpeechResult` are the whole speech)."""

    request_id: int
    samples: np.ndarray
    sample_rate: int


@dataclass(frozen=True, slots=True)
class SpeechResult:
    """The speech of a :class:`SynthesizeRequest`'s last (often only) piece: float32 mono samples
    at ``sample_rate``. Ends the request; no RequestEnded follows."""

    request_id: int
    samples: np.ndarray
    sample_rate: int


@dataclass(frozen=True, slots=True)
class ImageProgress:
    """How an :class:`ImageRequest`'s denoising goes, after ``step`` of its steps: sent after its
    first step (the request has started: it leaves its model's queue), and after each step a
    partial image is due, with partial image ``index`` (0-based): each of its images decoded from
    the latent, encoded as the request asked."""

    request_id: int
    step: int
    images: list[bytes] = field(default_factory=list)
    index: int | None = None


@dataclass(frozen=True, slots=True)
class ImageResult:
    """The images of an :class:`ImageRequest`, encoded as it asked; ``steps``: the denoising
    steps run (an edit runs ``strength`` of them). Ends the request; no RequestEnded follows."""

    request_id: int
    images: list[bytes]
    steps: int


@dataclass(frozen=True, slots=True)
class StatsReply:
    token: int
    stats: EngineStats


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent at most once a second while the engine has work, and once when it runs out: proof of
    progress for the server's stall watchdog, and the engine state ``/metrics`` reports without
    asking (a scrape never waits on an engine)."""

    stats: EngineStats


# The events of one request (what the server puts on the request's queue), then every event.
RequestEvent = (
    SequenceOutput
    | RequestEnded
    | EmbedResult
    | RerankResult
    | TranscriptDelta
    | TranscribeResult
    | SpeechPiece
    | SpeechResult
    | ImageProgress
    | ImageResult
)
Event = Loading | Ready | Fatal | RequestEvent | StatsReply | Heartbeat
