"""Prompt tokenization in the server process: one owner thread per model, bounded work per call.

Contract:

- Every call into the model's ``openvino_genai.Tokenizer`` runs on that model's own thread, one
  call at a time. Concurrent first use of a tokenizer from several threads deadlocked a fresh
  server (two threads inside ``encode`` waiting on each other in OpenVINO's first-use
  initialisation, one of them holding the GIL), so calls are never concurrent.
- The thread is started, and the tokenizer's one-time initialisation completed by a warm-up
  encode, while the model loads, before readiness turns 200: the event loop never starts a thread
  or waits for one to start on a request's path.
- ``encode`` hands the tokenizer bounded pieces of work. The binding holds the GIL for a whole
  call (the event loop stalls for as long), so a long text is first checked against the token
  limit from its length alone (a token spells at most ``max_token_bytes`` bytes, so a text of
  ``n`` characters has at least ``n / max_token_bytes`` tokens), then counted in chunks of at most
  :data:`CHUNK_CHARS` characters, each a separate job on the thread, stopping as soon as the count
  passes the limit. Only a text that fits is encoded in one piece, for exact ids. A text with
  fewer UTF-8 bytes than the limit cannot exceed it (a token spells at least one byte): it is
  encoded at once, without the counting pass.
- The tokenizer holds no memory a client can grow: :func:`open_tokenizer` opens the model's
  tokenizer with its BPE word cache off. openvino_tokenizers' ``BPETokenizer`` keeps every new
  pre-token (word) it meets, up to ``cache_capacity`` (20,000 as exported), each as large as the
  word and its token ids, and never gives them back: 4,000 requests of new 1,000-letter words grew
  the server by 9.4 MiB (~4.7 KiB a word, so ~90 MiB at the cap, and unbounded in the word's
  length). The cache has no byte bound to set. Off, tokenizing realistic prompts (this repository's
  docs, Python sources) costs 1.5x the CPU (1.6 instead of 1.1 us a token here), a few ms on a
  2,000-token prompt, small beside the request's own cost; the words' memory is then freed with
  each call.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import tempfile
from pathlib import Path
from typing import Any

from ovserve.errors import ContextLengthExceededError
from ovserve.models.threads import started_thread

log = logging.getLogger(__name__)

# ~10 ms of tokenizer time on this machine: the longest the event loop waits on one job.
CHUNK_CHARS = 16_384
# A chunk boundary can split a word that the whole text would spell with fewer tokens; the
# chunked count may exceed the exact one by a few tokens per boundary.
_BOUNDARY_SLACK_TOKENS = 4
# Decoding one token is ~1 µs of tokenizer time plus a Python call: a few ms per job.
_PIECES_PER_JOB = 4096
# Tokens encode() may add that no byte of the text spells (BOS, a SentencePiece dummy prefix).
_SPECIAL_TOKENS_SLACK = 8
_WARM_UP_TEXT = "Warm-up: 0123456789, déjà vu, 日本語, emoji 🙂."


TOKENIZER_XML = "openvino_tokenizer.xml"
# The BPETokenizer node's attribute (openvino_tokenizers): how many words it caches; 0 caches none.
_WORD_CACHE = re.compile(r'(\bcache_capacity=")\d+(")')


def without_word_cache(tokenizer_xml: str) -> str:
    """The tokenizer IR with every BPE word cache's capacity set to 0 (see the module docstring)."""
    return _WORD_CACHE.sub(r"\g<1>0\g<2>", tokenizer_xml)


def open_tokenizer(model_path: Path) -> Any:
    """The model's ``openvino_genai.Tokenizer``, its BPE word cache off.

    The tokenizer is opened from a scratch directory that mirrors the model's (links to every
    file) but for the rewritten ``openvino_tokenizer.xml``: opened from a directory, it reads the
    special tokens from the model's config files as it would from the model's own directory (the
    in-memory constructor does not: tiny-llm lost its BOS token). A tokenizer without a word cache
    is opened from the model's directory directly.
    """
    import openvino_genai as ov_genai

    try:
        exported = (model_path / TOKENIZER_XML).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ov_genai.Tokenizer(str(model_path))
    uncached = without_word_cache(exported)
    if uncached == exported:
        return ov_genai.Tokenizer(str(model_path))
    with tempfile.TemporaryDirectory(prefix="ovserve-tokenizer-") as scratch:
        mirror = Path(scratch)
        for entry in model_path.iterdir():
            if entry.name != TOKENIZER_XML:
                (mirror / entry.name).symlink_to(entry.resolve())
        (mirror / TOKENIZER_XML).write_text(uncached, encoding="utf-8")
        # Everything is read (or mapped) here: the directory can go once the tokenizer is built.
        return ov_genai.Tokenizer(str(mirror))


class PromptTooLongError(ContextLengthExceededError):
    """The prompt cannot fit; ``at_least`` is a lower bound of its token count."""

    def __init__(self, message: str, *, at_least: int, limit: int, param: str | None = None) -> None:
        super().__init__(message, param=param, prompt_tokens=at_least, maximum=limit)
        self.at_least = at_least


class PromptTokenizer:
    """A model's tokenizer behind its own thread (see the module docstring)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self._tokenizer = tokenizer
        self._name = name
        self._thread = started_thread(f"tokenizer-{name}")
        # Starts the thread and runs the tokenizer's first-use initialisation on it, now.
        self._thread.submit(self._encode_ids, _WARM_UP_TEXT, True).result()
        self.max_token_bytes = self._thread.submit(self._longest_token).result()

    def _longest_token(self) -> int | None:
        try:
            vocab = self._tokenizer.get_vocab()
        except Exception as exc:  # a tokenizer without a readable vocabulary: no length pre-check
            log.warning(
                "model %r: cannot read the tokenizer vocabulary (%s); long prompts are counted in chunks",
                self._name,
                exc,
            )
            return None
        longest = max((len(token) for token in vocab), default=0)
        return longest or None

    def _encode_ids(self, text: str, add_special_tokens: bool) -> list[int]:
        tokens = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(tokens.input_ids.data[0].tolist())  # tolist() already gives Python ints

    def _count(self, text: str, add_special_tokens: bool) -> int:
        tokens = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return int(tokens.input_ids.shape[1])

    def encode_blocking(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """For callers that are not on the event loop (startup, tests)."""
        return self._thread.submit(self._encode_ids, text, add_special_tokens).result()

    async def encode(
        self, text: str, *, add_special_tokens: bool, limit: int | None = None, param: str | None = None
    ) -> list[int]:
        """The text's token ids; :class:`PromptTooLongError` as soon as it is known to exceed ``limit``."""
        loop = asyncio.get_running_loop()
        if limit is not None and len(text) > CHUNK_CHARS and not self._surely_fits(text, limit):
            if self.max_token_bytes:
                at_least = math.ceil(len(text) / self.max_token_bytes)
                if at_least > limit:
                    raise self._too_long(at_least, limit, param)
            counted = 0
            for boundaries, start in enumerate(range(0, len(text), CHUNK_CHARS)):
                chunk = text[start : start + CHUNK_CHARS]
                special = add_special_tokens and start == 0
                counted += await loop.run_in_executor(self._thread, self._count, chunk, special)
                at_least = counted - boundaries * _BOUNDARY_SLACK_TOKENS
                if at_least > limit:
                    raise self._too_long(at_least, limit, param)
        return await loop.run_in_executor(self._thread, self._encode_ids, text, add_special_tokens)

    @staticmethod
    def _surely_fits(text: str, limit: int) -> bool:
        """Whether ``text`` fits ``limit`` without counting: every token spells at least one byte, so
        a text has at most as many tokens as UTF-8 bytes (plus the few special tokens added). Most
        long prompts pass, and are then tokenized once instead of counted in chunks first."""
        return len(text) + _SPECIAL_TOKENS_SLACK <= limit and len(text.encode("utf-8")) + _SPECIAL_TOKENS_SLACK <= limit

    def _too_long(self, at_least: int, limit: int, param: str | None) -> PromptTooLongError:
        return PromptTooLongError(
            f"the prompt has at least {at_least} tokens, more than model '{self._name}' accepts ({limit})",
            at_least=at_least,
            limit=limit,
            param=param,
        )

    def _count_many(self, texts: list[str], add_special_tokens: bool) -> list[int]:
        tokens = self._tokenizer.encode(texts, add_special_tokens=add_special_tokens)
        # A batch is padded to its longest text: the attention mask marks each text's own tokens.
        counts = [int(count) for count in tokens.attention_mask.data.sum(axis=1)]
        if len(counts) != len(texts):
            # A batch whose every text normalizes to nothing ("", control characters) comes back
            # as one row: count them one by one.
            return [self._count_many([text], add_special_tokens)[0] for text in texts]
        return counts

    async def count_each(
        self, texts: list[str], *, limit: int, truncate: bool, param: str, label: str | None = None
    ) -> list[int]:
        """Each text's token count (special tokens included), as a retrieval pipeline will see it.

        A text over ``limit`` is a :class:`PromptTooLongError` naming it and both numbers, unless
        ``truncate``, when it counts as ``limit`` (the pipeline cuts it there). Short texts are
        counted together in jobs of at most :data:`CHUNK_CHARS` characters; a long one on its own,
        in chunks (see :meth:`encode`).
        """
        loop = asyncio.get_running_loop()
        counts = [0] * len(texts)
        batch: list[int] = []
        batch_chars = 0

        async def flush() -> None:
            nonlocal batch, batch_chars
            if batch:
                found = await loop.run_in_executor(self._thread, self._count_many, [texts[i] for i in batch], True)
                for index, count in zip(batch, found, strict=True):
                    counts[index] = count
            batch, batch_chars = [], 0

        for index, text in enumerate(texts):
            if len(text) > CHUNK_CHARS:
                try:
                    counts[index] = len(await self.encode(text, add_special_tokens=True, limit=limit))
                except PromptTooLongError as exc:
                    counts[index] = exc.at_least
                continue
            if batch_chars + len(text) > CHUNK_CHARS:
                await flush()
            batch.append(index)
            batch_chars += len(text)
        await flush()
        for index, count in enumerate(counts):
            if count > limit:
                if not truncate:
                    what = label or f"input {index}"
                    raise PromptTooLongError(
                        f"{what} has {'at least ' if len(texts[index]) > CHUNK_CHARS else ''}{count} tokens, "
                        f"more than model '{self._name}' accepts ({limit})",
                        at_least=count,
                        limit=limit,
                        param=param,
                    )
                counts[index] = limit
        return counts

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def _pieces(self, ids: list[int]) -> list[str]:
        return [str(self._tokenizer.decode([token], skip_special_tokens=False)) for token in ids]

    async def decode(self, ids: list[int], *, skip_special_tokens: bool) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._decode, ids, skip_special_tokens)

    async def pieces(self, ids: list[int]) -> list[str]:
        """Each token's own text (special tokens spelled out), in bounded jobs."""
        loop = asyncio.get_running_loop()
        found: list[str] = []
        for start in range(0, len(ids), _PIECES_PER_JOB):
            found += await loop.run_in_executor(self._thread, self._pieces, ids[start : start + _PIECES_PER_JOB])
        return found

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
