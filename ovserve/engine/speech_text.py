"""Text to speech input -> pieces a model's text encoder can take, in reading order.

Contract: :func:`split_for_speech` returns the pieces of ``text`` such that

- every piece satisfies ``count(piece) <= max_tokens`` (``count`` is the model's own token count,
  special tokens included, or a conservative stand-in);
- every piece is stripped of surrounding whitespace and none is empty: whitespace-only spans are
  never returned, so none reaches the model;
- the pieces are contiguous spans of ``text`` in order: joined, their non-whitespace characters are
  exactly those of ``text`` (nothing lost, repeated or reordered);
- cuts fall at the coarsest boundary that fits: between sentences (after ``.!?…`` and their closing
  quotes or brackets when whitespace follows, after the CJK full stop, exclamation and question
  marks, and at line breaks), else between words (at whitespace), else between characters (never
  before a combining mark, a variation selector or a skin tone, nor on either side of a zero-width
  joiner, so an accented letter or an emoji sequence stays whole), else, for a "character" of
  marks or joiners longer than a piece (hostile input), between code points;
- neighbouring sentences (or words) are packed into one piece while it fits, so short sentences do
  not each become a piece of their own; a sentence too long for one piece is cut into words, and
  its last words start no packing across the sentence end (a piece never ends mid-sentence when a
  sentence end would do).

``count`` is assumed to grow (roughly) with the span: it is used in binary searches for the longest
prefix that fits. A count that does not grow only makes pieces shorter than they could be, never
too long: a piece is returned only after ``count`` said it fits. A single character (grapheme) whose
count alone exceeds ``max_tokens`` cannot be spoken at all: :class:`ValueError` (no real model's
budget is that small; ``max_tokens`` under 1 is refused at once).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator

# A sentence ends after its terminator and any closing quotes or brackets, when whitespace follows
# (or the text ends); CJK terminators need no space after them; a line break always ends one.
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’»)\]]*(?=\s|$)|[。！？]+[」』）”’]*|\n")
_WHITESPACE = re.compile(r"\s+")
_ZWJ = "\u200d"


def split_for_speech(text: str, max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """The pieces of ``text`` (see the module docstring)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    pieces: list[str] = []
    _split(text, 0, len(text), 0, lambda piece: count(piece) <= max_tokens, pieces)
    return pieces


_Level = Callable[[str, int, int], Iterator[int]]


def _sentence_cuts(text: str, start: int, end: int) -> Iterator[int]:
    for match in _SENTENCE_END.finditer(text, start, end):
        yield match.end()


def _word_cuts(text: str, start: int, end: int) -> Iterator[int]:
    for match in _WHITESPACE.finditer(text, start, end):
        yield match.start()


def _grapheme_cuts(text: str, start: int, end: int) -> Iterator[int]:
    for index in range(start + 1, end):
        char = text[index]
        # Cutting here would split one visible character: a base letter from its accent, an emoji
        # from its variation selector or skin tone, or the parts of a joined emoji sequence.
        if unicodedata.category(char).startswith("M") or char == _ZWJ or text[index - 1] == _ZWJ:
            continue
        if "\ufe00" <= char <= "\ufe0f" or "\U0001f3fb" <= char <= "\U0001f3ff":
            continue
        yield index


def _code_point_cuts(text: str, start: int, end: int) -> Iterator[int]:
    # Only for a "character" of marks or joiners too long for a piece (hostile input): no input may
    # reach the model in a shape it cannot take, even one that ends up split inside a character.
    return iter(range(start + 1, end))


_LEVELS: tuple[_Level, ...] = (_sentence_cuts, _word_cuts, _grapheme_cuts, _code_point_cuts)


def _split(text: str, start: int, end: int, level: int, fits: Callable[[str], bool], out: list[str]) -> None:
    """Append the pieces of ``text[start:end]`` to ``out``, cutting at ``_LEVELS[level]`` boundaries
    and going one level finer inside a unit that does not fit alone."""
    cuts = sorted({start, end, *(cut for cut in _LEVELS[level](text, start, end) if start < cut < end)})
    first = 0
    while first < len(cuts) - 1:
        span = _longest_fitting(text, cuts, first, fits)
        if span is None:
            # The unit from cuts[first] to cuts[first + 1] is too long by itself.
            if level + 1 == len(_LEVELS):
                raise ValueError(f"{text[cuts[first] : cuts[first + 1]]!r} alone exceeds the token budget")
            _split(text, cuts[first], cuts[first + 1], level + 1, fits, out)
            first += 1
            continue
        last, piece = span
        if piece:
            out.append(piece)
        first = last


def _longest_fitting(text: str, cuts: list[int], first: int, fits: Callable[[str], bool]) -> tuple[int, str] | None:
    """The largest ``last`` > ``first`` whose stripped span ``text[cuts[first]:cuts[last]]`` fits,
    with that span; None when not even one unit fits. A whitespace-only span always "fits" (it is
    dropped, never counted)."""

    def piece(last: int) -> str:
        return text[cuts[first] : cuts[last]].strip()

    def ok(last: int) -> bool:
        stripped = piece(last)
        return not stripped or fits(stripped)

    if not ok(first + 1):
        return None
    # Gallop, then bisect: each count is of at most about twice the piece that comes out, not of the
    # whole rest of the text (4,096 characters counted a dozen times for each piece).
    low, high, step = first + 1, len(cuts) - 1, 1  # ok(low) holds; find the largest such index
    while low < high:
        probe = min(low + step, high)
        if not ok(probe):
            high = probe - 1
            break
        low, step = probe, step * 2
    while low < high:
        middle = (low + high + 1) // 2
        if ok(middle):
            low = middle
        else:
            high = middle - 1
    return low, piece(low)
