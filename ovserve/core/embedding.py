"""Embeddings of texts, in no dialect's shape: checks, counting, admission, the engine, Matryoshka.

:func:`prepare_embedding` and :class:`EmbeddingJob` are what a dialect's embeddings route needs
below its own request and response models: the one embedding path (OpenAI's ``/embeddings`` and
Ollama's ``/api/embed`` and ``/api/embeddings`` render its result). Token-id inputs are decoded to
text first (the pipeline takes only text; special ids are dropped, so an input of only special ids
is a 400). Every check that can fail happens before engine work. The job takes its model's
admission and engine as every request's work does (``ovserve.core.engine_work``, driven by the
request envelope).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ovserve.core.engine_work import ModelWork
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel


@dataclass(kw_only=True)
class EmbeddingJob(ModelWork):
    """Texts checked and counted for model ``model``'s engine; :meth:`run` embeds them."""

    texts: list[str]
    prompt_tokens: int
    dimensions: int | None

    @property
    def admission_tokens(self) -> int:
        return self.prompt_tokens

    async def run(self) -> np.ndarray:
        """One row per text, in order (shortened to ``dimensions`` when asked: Matryoshka)."""
        vectors = await self.model.engine.embed(self.texts)
        self.started()
        if self.dimensions is not None:
            vectors = shorten(self.model, vectors, self.dimensions)
        return vectors

    @property
    def waited_ns(self) -> int:
        """How long the request waited for the model's engine (a load included)."""
        return self.lease.waited_ns if self.lease is not None else 0


async def prepare_embedding(
    models: ModelRegistry,
    name: str,
    inputs: Sequence[str | Sequence[int]],
    *,
    truncate: bool,
    dimensions: int | None,
    param: str = "input",
) -> EmbeddingJob:
    """``inputs`` (texts, or token-id lists) for model ``name``, checked and counted. ``truncate``:
    an input over the model's limit is cut (only where the model's graph truncates; elsewhere it
    stays a 400 naming the input); ``param`` names the client's input field in each complaint."""
    model = models.get(name)
    model.require_task("embeddings")
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
    texts = [await _text_of(model, item, index, param) for index, item in enumerate(inputs)]
    counts = await model.tokenizer.count_each(
        texts, limit=model.context_length, truncate=truncate and settings.truncate, param=param
    )
    return EmbeddingJob(model=model, texts=texts, prompt_tokens=sum(counts), dimensions=dimensions)


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
