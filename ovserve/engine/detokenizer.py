"""Token ids to text deltas in the engine process, batched: one detokenizer call per step.

Contract:

- :class:`IncrementalDetokenizer` turns one sequence's growing list of token ids into text deltas
  that never split a UTF-8 character, decoding a short window (vLLM's prefix/read offsets)
  instead of the whole sequence; once the sequence ends, a full decode reconciles, so the joined
  deltas equal ``decode(all ids)`` (or, if the window decode diverged, never resend text).
- :class:`DecodeBatch` gathers the decodes every sequence of a step needs and runs them as one
  ragged batch per ``skip_special_tokens`` value. Each call into the detokenizer costs ~80 us of
  fixed overhead whatever its size (a batch of 128 windows costs about what 3 single calls do),
  and it runs on the engine's step thread between two ``step()`` calls, where every microsecond
  delays every stream.
- The text of a sequence comes out the same whether its decodes are batched or not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("ovserve.engine")


class IncrementalDetokenizer:
    """One sequence's ids and the text sent for them so far (see the module docstring)."""

    def __init__(self, skip_special_tokens: bool) -> None:
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.emitted = ""

    def extend(self, new_ids: list[int]) -> tuple[list[int], list[int]]:
        """Take ``new_ids``; the two windows to decode: what was read before, and that plus the new."""
        self.ids.extend(new_ids)
        return self.ids[self._prefix_offset : self._read_offset], self.ids[self._prefix_offset :]

    def accept(self, prefix_text: str, full_text: str) -> str:
        """The delta given the windows' texts; empty while a UTF-8 character is incomplete."""
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""  # an incomplete UTF-8 sequence: wait for the next token
        delta = full_text[len(prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        self.emitted += delta
        return delta

    def settle(self, final_text: str) -> str:
        """The rest of the text, given ``decode(self.ids)`` once the sequence has ended."""
        if final_text.startswith(self.emitted):
            delta = final_text[len(self.emitted) :]
        else:  # the window decode diverged (tokenizer-specific spacing): never resend text
            log.debug("incremental decode diverged from full decode; dropping the tail")
            delta = ""
        self.emitted += delta
        return delta


@dataclass(slots=True)
class _Pending:
    decoder: IncrementalDetokenizer
    windows: tuple[int, int] | None  # batch slots of (prefix window, full window)
    final: int | None  # batch slot of the full decode, for a sequence that ends
    done: Callable[[str], None]


class DecodeBatch:
    """The decodes of one step, run together; each request's callback gets its delta."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._pending: list[_Pending] = []
        self._in_batch: set[int] = set()  # id() of decoders with a pending decode
        self._sequences: dict[bool, list[list[int]]] = {True: [], False: []}

    def add(self, decoder: IncrementalDetokenizer, new_ids: list[int], ends: bool, done: Callable[[str], None]) -> None:
        """Queue ``new_ids`` of ``decoder`` (and its final decode when ``ends``); ``done(delta)`` on :meth:`run`."""
        if id(decoder) in self._in_batch:  # a second output of one sequence: its windows depend on the first
            self.run()
        sequences = self._sequences[decoder.skip_special_tokens]
        windows = None
        if new_ids:
            prefix_window, full_window = decoder.extend(new_ids)
            sequences.extend((prefix_window, full_window))
            windows = (len(sequences) - 2, len(sequences) - 1)
        final = None
        if ends:
            sequences.append(list(decoder.ids))
            final = len(sequences) - 1
        self._in_batch.add(id(decoder))
        self._pending.append(_Pending(decoder, windows, final, done))

    def run(self) -> None:
        """Decode everything queued (at most one detokenizer call per skip_special_tokens value)."""
        texts = {
            skip: [str(text) for text in self._tokenizer.decode(sequences, skip_special_tokens=skip)]
            for skip, sequences in self._sequences.items()
            if sequences
        }
        pending, self._pending = self._pending, []
        self._in_batch.clear()
        self._sequences = {True: [], False: []}
        for item in pending:
            decoded = texts.get(item.decoder.skip_special_tokens, [])
            delta = ""
            if item.windows is not None:
                delta = item.decoder.accept(decoded[item.windows[0]], decoded[item.windows[1]])
            if item.final is not None:
                delta += item.decoder.settle(decoded[item.final])
            item.done(delta)


def decode_now(tokenizer: Any, decoder: IncrementalDetokenizer, new_ids: list[int], ends: bool = False) -> str:
    """One sequence's delta at once (the stateful loop streams token by token, with nothing to batch)."""
    deltas: list[str] = []
    batch = DecodeBatch(tokenizer)
    batch.add(decoder, new_ids, ends, deltas.append)
    batch.run()
    return deltas[0]
