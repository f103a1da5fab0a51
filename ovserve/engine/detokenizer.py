"""Token ids to text deltas in the engine process: at most one detokenizer call per step, often none.

Contract:

- :class:`IncrementalDetokenizer` turns one sequence's growing list of token ids into text deltas
  that never split a UTF-8 character, decoding a short window (vLLM's prefix/read offsets)
  instead of the whole sequence; once the sequence ends, a full decode reconciles, so the joined
  deltas equal ``decode(all ids)`` (or, if the window decode diverged, never resend text).
- :class:`TokenPieces` is each token's text where it follows other text, learned from the
  detokenizer itself when the engine starts. A step whose new tokens all have a piece needs no
  detokenizer call: their delta is the pieces joined. Between two ``step()`` calls a detokenizer
  call costs ~0.5 ms (its executor's threads are asleep by then, ~0.1 ms back to back) and its
  threads wake on the cores the step's threads need; at one stream that measured 4-6% of the
  tokens per second. A piece is kept only where joining is what the detokenizer does: a token
  that is not whole UTF-8 on its own has none, and the table is off for a tokenizer whose
  decoding looks across tokens (clean-up of spaces before punctuation, word suffixes), which
  a check at build time finds; a sequence's final full decode stays the referee, and a
  disagreement turns the table off for good.
- :class:`DecodeBatch` gathers the decodes every sequence of a step needs and runs them as one
  ragged batch per ``skip_special_tokens`` value. Each call into the detokenizer costs ~80 us of
  fixed overhead whatever its size (a batch of 128 windows costs about what 3 single calls do),
  and it runs on the engine's step thread between two ``step()`` calls, where every microsecond
  delays every stream.
- The text of a sequence comes out the same whether its decodes are batched or not, and
  whether its deltas came from pieces or from the detokenizer.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("ovserve.engine")

# A token whose text stands alone: what every other token's piece is measured after.
_ANCHOR_TEXT = "a"
# Pieces beside which a detokenizer that rewrites across tokens shows it: HF's clean-up of
# tokenization spaces (openvino_tokenizers' RegexDecodingStep) joins " " with these.
_CLEAN_UP_STARTS = (".", "?", "!", ",", "'", "n't")
# The build-time check: random runs of tokens, and pairs of a token ending in a space with one
# of the above; a handful of detokenizer calls.
_CHECK_RUNS, _CHECK_RUN_LENGTH, _CHECK_PAIRS = 64, 24, 512
_BUILD_BATCH = 8192  # sequences per detokenizer call while building


class TokenPieces:
    """Each token's text after other text, per ``skip_special_tokens`` value (module docstring).

    ``None`` for a token without a piece (not whole UTF-8 on its own, or beyond the vocabulary).
    Memory: one string per vocabulary entry (~10 MB for 150k tokens); the ``skip_special_tokens``
    table keeps only the entries where it differs.
    """

    def __init__(self, plain: list[str | None], skipped: dict[int, str | None]) -> None:
        self._plain = plain
        self._skipped = skipped
        self.enabled = True

    @classmethod
    def build(cls, detokenizer: Detokenizer, vocab_size: int) -> TokenPieces | None:
        """The table of the first ``vocab_size`` ids, or None where joining pieces would not give
        what the detokenizer gives (the reason is logged)."""
        encoded = detokenizer.tokenizer.encode(_ANCHOR_TEXT, add_special_tokens=False)
        anchor = [int(token) for token in encoded.input_ids.data[0]]
        if len(anchor) != 1 or detokenizer.decode([anchor], skip=False)[0] != _ANCHOR_TEXT:
            log.info("streaming detokenizes every step: %r is not one plain token here", _ANCHOR_TEXT)
            return None
        tables = {skip: _measure(detokenizer, anchor, range(vocab_size), skip) for skip in (False, True)}
        skipped = {token: piece for token, piece in enumerate(tables[True]) if piece != tables[False][token]}
        pieces = cls(tables[False], skipped)
        for skip in (False, True):
            mismatch = pieces._find_mismatch(detokenizer, anchor, skip)
            if mismatch is not None:
                log.info(
                    "streaming detokenizes every step: this tokenizer's text of %s is %r, not its "
                    "tokens' texts joined", mismatch[0], mismatch[1],
                )  # fmt: skip
                return None
        return pieces

    def text(self, ids: Sequence[int], skip_special_tokens: bool) -> str | None:
        """The text ``ids`` add after other text, or None when any of them has no piece."""
        plain, skipped, size = self._plain, self._skipped, len(self._plain)
        parts: list[str] = []
        for token in ids:
            if not 0 <= token < size:
                return None
            piece = skipped.get(token, plain[token]) if skip_special_tokens else plain[token]
            if piece is None:
                return None
            parts.append(piece)
        return "".join(parts)

    def disable(self, reason: str) -> None:
        if self.enabled:
            self.enabled = False
            log.warning("streaming detokenizes every step from now on: %s", reason)

    def _find_mismatch(self, detokenizer: Detokenizer, anchor: list[int], skip: bool) -> tuple[list[int], str] | None:
        """A run of tokens whose decoded text is not their pieces joined, if the check finds one."""
        table = [self._skipped.get(token, piece) for token, piece in enumerate(self._plain)] if skip else self._plain
        pieces = {token: piece for token, piece in enumerate(table) if piece is not None}
        if not pieces:
            return None
        with_piece = list(pieces)
        rng = random.Random(0)  # the same check every start: a mismatch is never intermittent
        runs = [[rng.choice(with_piece) for _ in range(_CHECK_RUN_LENGTH)] for _ in range(_CHECK_RUNS)]
        ends_in_space = [token for token, piece in pieces.items() if piece.endswith(" ")]
        clean_up_starts = [token for token, piece in pieces.items() if piece.startswith(_CLEAN_UP_STARTS)]
        if ends_in_space and clean_up_starts:
            runs += [[rng.choice(ends_in_space), rng.choice(clean_up_starts)] for _ in range(_CHECK_PAIRS)]
        decoded = detokenizer.decode([anchor + run for run in runs], skip)
        for run, text in zip(runs, decoded, strict=True):
            if text != _ANCHOR_TEXT + (self.text(run, skip) or ""):
                return run, text
        return None


class Detokenizer:
    """An engine's tokenizer as its streams use it: ragged batch decodes, and the token pieces.

    ``openvino_genai.Tokenizer.decode`` pads a batch's shorter sequences with the pad token, whose
    text stays in theirs unless special tokens are skipped (and always when the pad token is not
    special): :meth:`decode` takes each padded sequence's pad texts back off, so every text is
    the sequence's own.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.pieces: TokenPieces | None = None
        self._pad_texts: dict[bool, str] = {}

    def learn_pieces(self, vocab_size: int) -> None:
        """Build :attr:`pieces` for ids below ``vocab_size`` (None if this tokenizer cannot use them)."""
        self.pieces = TokenPieces.build(self, vocab_size)

    def decode(self, sequences: list[list[int]], skip: bool) -> list[str]:
        texts = [str(text) for text in self.tokenizer.decode(sequences, skip_special_tokens=skip)]
        longest = max((len(sequence) for sequence in sequences), default=0)
        for index, sequence in enumerate(sequences):
            if len(sequence) < longest:
                texts[index] = self._unpad(texts[index], sequence, longest - len(sequence), skip)
        return texts

    def _unpad(self, text: str, sequence: list[int], pads: int, skip: bool) -> str:
        pad_text = self._pad_texts.get(skip)
        if pad_text is None:
            pad_id = int(self.tokenizer.get_pad_token_id())
            pad_text = self._pad_texts[skip] = str(self.tokenizer.decode([[pad_id]], skip_special_tokens=skip)[0])
        suffix = pad_text * pads
        if text.endswith(suffix):
            return text[: len(text) - len(suffix)]
        # Not what padding was seen to do: decode the sequence alone.
        return str(self.tokenizer.decode([sequence], skip_special_tokens=skip)[0])


def _measure(detokenizer: Detokenizer, anchor: list[int], tokens: range, skip: bool) -> list[str | None]:
    """Each token's piece: the anchor and the token decoded, minus the anchor's text."""
    pieces: list[str | None] = []
    for start in range(0, len(tokens), _BUILD_BATCH):
        chunk = tokens[start : start + _BUILD_BATCH]
        for text in detokenizer.decode([[*anchor, token] for token in chunk], skip):
            piece = text[len(_ANCHOR_TEXT) :]
            # U+FFFD: bytes of a character the token does not finish (or start) on its own.
            # An empty piece (a special token skipped, an id past the vocabulary, bytes a
            # detokenizer drops) is left to the detokenizer too: rare, and it may join its neighbours.
            whole = text.startswith(_ANCHOR_TEXT) and piece != "" and "\ufffd" not in piece
            pieces.append(piece if whole else None)
    return pieces


class IncrementalDetokenizer:
    """One sequence's ids and the text sent for them so far (see the module docstring)."""

    def __init__(self, skip_special_tokens: bool) -> None:
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.emitted = ""
        self.joined_pieces = False  # some delta came from TokenPieces, not from the detokenizer
        self.diverged = False  # the final decode did not start with what was sent

    @property
    def follows_text(self) -> bool:
        """Whether new tokens' text would come after text already sent, with no token held back
        (a detokenizer strips a leading space only at the start of a text)."""
        return bool(self.emitted) and self._read_offset == len(self.ids)

    def extend(self, new_ids: list[int]) -> tuple[list[int], list[int]]:
        """Take ``new_ids``; the two windows to decode: what was read before, and that plus the new."""
        self.ids.extend(new_ids)
        return self.ids[self._prefix_offset : self._read_offset], self.ids[self._prefix_offset :]

    def extend_joined(self, new_ids: list[int], text: str) -> str:
        """Take ``new_ids`` whose text after this sequence's is ``text`` (their pieces joined)."""
        self.ids.extend(new_ids)
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        self.emitted += text
        self.joined_pieces = True
        return text

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
            self.diverged = True
            delta = ""
        self.emitted += delta
        return delta


@dataclass(slots=True)
class _Pending:
    decoder: IncrementalDetokenizer
    windows: tuple[int, int] | None  # batch slots of (prefix window, full window)
    final: int | None  # batch slot of the full decode, for a sequence that ends
    done: Callable[[str], None]
    joined: str = ""  # the delta TokenPieces gave, when the new tokens needed no decode


class DecodeBatch:
    """The decodes of one step, run together; each request's callback gets its delta."""

    def __init__(self, detokenizer: Detokenizer) -> None:
        self._detokenizer = detokenizer
        self._pieces = detokenizer.pieces
        self._pending: list[_Pending] = []
        self._in_batch: set[int] = set()  # id() of decoders with a pending decode
        self._sequences: dict[bool, list[list[int]]] = {True: [], False: []}

    def add(self, decoder: IncrementalDetokenizer, new_ids: list[int], ends: bool, done: Callable[[str], None]) -> None:
        """Queue ``new_ids`` of ``decoder`` (and its final decode when ``ends``); ``done(delta)`` on :meth:`run`."""
        if id(decoder) in self._in_batch:  # a second output of one sequence: its windows depend on the first
            self.run()
        sequences = self._sequences[decoder.skip_special_tokens]
        windows = None
        joined = ""
        if new_ids:
            text = None
            if self._pieces is not None and self._pieces.enabled and decoder.follows_text:
                text = self._pieces.text(new_ids, decoder.skip_special_tokens)
            if text is not None:
                joined = decoder.extend_joined(new_ids, text)
            else:
                prefix_window, full_window = decoder.extend(new_ids)
                sequences.extend((prefix_window, full_window))
                windows = (len(sequences) - 2, len(sequences) - 1)
        final = None
        if ends:
            sequences.append(list(decoder.ids))
            final = len(sequences) - 1
        self._in_batch.add(id(decoder))
        self._pending.append(_Pending(decoder, windows, final, done, joined))

    def run(self) -> None:
        """Decode everything queued (at most one detokenizer call per skip_special_tokens value,
        none when every delta came from pieces)."""
        texts = {
            skip: self._detokenizer.decode(sequences, skip) for skip, sequences in self._sequences.items() if sequences
        }
        pending, self._pending = self._pending, []
        self._in_batch.clear()
        self._sequences = {True: [], False: []}
        for item in pending:
            decoded = texts.get(item.decoder.skip_special_tokens, [])
            delta = item.joined
            if item.windows is not None:
                delta += item.decoder.accept(decoded[item.windows[0]], decoded[item.windows[1]])
            if item.final is not None:
                delta += item.decoder.settle(decoded[item.final])
                if item.decoder.diverged and item.decoder.joined_pieces and self._pieces is not None:
                    self._pieces.disable("a sequence's text differed from its tokens' pieces joined")
            item.done(delta)


def decode_now(
    detokenizer: Detokenizer, decoder: IncrementalDetokenizer, new_ids: list[int], ends: bool = False
) -> str:
    """One sequence's delta at once (the stateful loop streams token by token, with nothing to batch)."""
    deltas: list[str] = []
    batch = DecodeBatch(detokenizer)
    batch.add(decoder, new_ids, ends, deltas.append)
    batch.run()
    return deltas[0]
