"""Embeddings of texts, in no dialect's shape: checks, counting, admission, the engine, Matryoshka.

:func:`embed_texts` is what a dialect's embeddings route needs below its own request and response
models: the one embedding path (OpenAI's ``/embeddings`` and Ollama's ``/api/embed`` and
``/api/embeddings`` render its result). Token-id inputs are decoded to text first (the pipeline
takes only text; special ids are dropped, so an input of only special ids is a 400). Every check
that can fail happens before engine work; ``param`` names the client's input field in each complaint. The model's engine
is held for the work (loaded for it when it was unloaded), as every request holds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ovserve.core.engine_work import engine_work
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.metrics import RequestRecorder
from ovserve.models.served import ModelRegistry, ServedModel


@dataclass(frozen=True, slots=True)
class Embedded:
    model: ServedModel
    vectors: np.ndarray  # one row per text, in order
    prompt_tokens: int
    waited_ns: int  # how long the request waited for the model's engine (a load included)


async def embed_texts(
    models: ModelRegistry,
    name: str,
    inputs: Sequence[str | Sequence[int]],
    *,
    truncate: bool,
    dimensions: int | None,
    recorder: RequestRecorder,
    deadline: float | None,
    keep_alive: float | None = None,
    param: str = "input",
) -> Embedded:
    """``inputs`` (texts, or token-id lists) embedded by model ``name``. ``truncate``: an input
    over the model's limit is cut (only where the model's graph truncates; elsewhere it stays a 400 naming the input).
    ``deadline`` (event-loop time): a wait for the model's load past it is a 503, work past it a
    TimeoutError. ``keep_alive``: how long the model stays loaded after this request."""
    model = models.get(name)
    model.require_task("embeddings")
    recorder.model = model.name
    model.check_available()
    settings = model.settings.retrieval
    if len(inputs) > settings.max_allowed_chunks:
        raise BadRequestError(
            f"the request has {len(inputs)} inputs, more than model '{model.name}' takes at once "
            f"(max_allowed_chunks {settings.max_allowed_chunks}); split it",
            param=param,
        )
    if any(not item for item in inputs):
        raise BadRequestError("inputs must not be empty", param=param)
    if dimensions is not None and not settings.matryoshka_embeddings:
        raise UnsupportedParameterError(
            f"model '{model.name}' does not support 'dimensions' (its graph does not declare matryoshka_embeddings)",
            param="dimensions",
        )
    async with asyncio.timeout_at(deadline):  # the tokenizer's work counts towards the deadline
        texts = [await _text_of(model, item, index, param) for index, item in enumerate(inputs)]
        counts = await model.tokenizer.count_each(
            texts, limit=model.context_length, truncate=truncate and settings.truncate, param=param
        )
    prompt_tokens = sum(counts)
    async with engine_work(model, prompt_tokens, recorder, deadline, keep_alive=keep_alive) as lease:
        vectors = await model.engine.embed(texts)
    if dimensions is not None:
        vectors = shorten(model, vectors, dimensions)
    return Embedded(model, vectors, prompt_tokens, lease.waited_ns)


async def _text_of(model: ServedModel, item: str | Sequence[int], index: int, param: str) -> str:
    if isinstance(item, str):
        return item
    text = await model.tokenizer.decode(list(item), skip_special_tokens=True)
    if not text:
        # Only special (or unknown) ids: the pipeline takes text, and an empty text is refused as
        # an empty string input is.
        raise BadRequestError(
            f"input {index}: its token ids decode to an empty text (special or unknown ids only)", param=param
        )
    return text


def shorten(model: ServedModel, vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """Matryoshka: the first ``dimensions`` values, normalised again when the model normalises."""
    size = vectors.shape[1]
    if dimensions > size:
        raise BadRequestError(
            f"'dimensions' is {dimensions} but model '{model.name}' makes {size}-dimensional embeddings",
            param="dimensions",
        )
    shortened = vectors[:, :dimensions]
    if model.settings.retrieval.normalize_embeddings:
        norms = np.linalg.norm(shortened, axis=1, keepdims=True)
        shortened = shortened / np.maximum(norms, np.finfo(np.float32).tiny)
    return shortened
