"""The speech input splitter (``ovserve.engine.speech_text``): every piece fits the token budget, none
is blank, nothing is lost or reordered, and cuts fall at sentences, then words, then characters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ovserve.engine.speech_text import split_for_speech


def chars(text: str) -> int:
    """SpeechT5's tokenizer is character-level: one token a character, plus the end of sequence."""
    return len(text) + 1


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def visible(text: str) -> str:
    return "".join(text.split())


def check(text: str, budget: int, count: object = chars) -> list[str]:
    assert callable(count)
    pieces = split_for_speech(text, budget, count)
    assert pieces, "a text with something to say gives at least one piece"
    for piece in pieces:
        assert piece == piece.strip() and piece, repr(piece)
        assert count(piece) <= budget, (len(piece), piece[:40])
    assert visible("".join(pieces)) == visible(text)
    return pieces


def test_a_text_that_fits_is_one_piece_stripped() -> None:
    assert check("  Hello there. How are you?\n", 100) == ["Hello there. How are you?"]


def test_sentences_are_packed_while_they_fit_and_cut_between_them() -> None:
    text = "One two three. Four five six! Seven eight nine? Ten eleven twelve."
    pieces = check(text, 32)
    assert pieces == ["One two three. Four five six!", "Seven eight nine?", "Ten eleven twelve."]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    pieces = check('He said "stop." Then (after a pause.) he left.', 22)
    assert pieces == ['He said "stop."', "Then (after a pause.)", "he left."]


def test_a_decimal_point_is_not_a_sentence_end() -> None:
    pieces = check("It costs 3.50 dollars today. Tomorrow more.", 30)
    assert pieces == ["It costs 3.50 dollars today.", "Tomorrow more."]


def test_line_breaks_and_cjk_terminators_end_sentences() -> None:
    assert check("first line\nsecond line", 14) == ["first line", "second line"]
    assert check("今日は晴れです。明日は雨です。", 9) == ["今日は晴れです。", "明日は雨です。"]


def test_a_long_sentence_is_cut_between_words_and_the_next_sentence_starts_its_own_piece() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta. Iota kappa."
    pieces = check(text, 20)
    assert pieces == ["alpha beta gamma", "delta epsilon zeta", "eta theta.", "Iota kappa."]


def test_a_giant_word_is_cut_between_characters() -> None:
    word = "x" * 4000
    pieces = check(f"Say {word} now.", 450)
    assert [len(piece) for piece in pieces] == [3, 449, *([449] * 7), 408, 4]
    assert "".join(pieces[1:-1]) == word


def test_a_cut_never_splits_an_accent_or_an_emoji_sequence() -> None:
    accented = "e\u0301" * 30  # é as e + combining acute accent
    for piece in check(accented, 8):
        assert not piece.startswith("\u0301")
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji of five code points
    pieces = check(family * 6, 40, utf8)  # 18 bytes each: two a piece
    assert all(piece.count("\u200d") == 2 * piece.count("\U0001f468") for piece in pieces)
    assert all(piece.startswith("\U0001f468") for piece in pieces)


def test_a_character_of_a_thousand_marks_is_cut_between_code_points() -> None:
    hostile = "a" + "\u0301" * 1000 + " b"
    pieces = check(hostile, 100)
    assert len(pieces) > 10 and pieces[-1] == "b"


def test_multibyte_text_is_counted_by_the_given_count() -> None:
    text = "Привет мир. " * 50
    for piece in check(text, 64, utf8):
        assert utf8(piece) <= 64


def test_whitespace_only_spans_are_never_pieces() -> None:
    text = "Hello.\n\n\n          \n\t  World.       " + " " * 600 + "End."
    assert check(text, 10) == ["Hello.", "World.", "End."]
    assert split_for_speech("   \n\t  ", 10, chars) == []


def test_punctuation_only_text_is_still_said() -> None:
    assert check("?!", 10) == ["?!"]


def test_a_budget_no_character_fits_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        split_for_speech("hi", 0, chars)
    with pytest.raises(ValueError, match="exceeds"):
        split_for_speech("hi", 1, chars)  # each character alone counts 2


def test_a_count_that_does_not_grow_only_makes_pieces_shorter() -> None:
    # A count that penalizes even lengths: binary search may stop early, yet every piece fits.
    check("word " * 300, 40, lambda text: len(text) + (30 if len(text) % 2 == 0 else 1))


@given(
    st.text(
        alphabet=st.sampled_from([*"ab cé\u0301.!?\n\t。\u200d", "\U0001f600", "\ufe0f", "\U0001f3fb"]),
        min_size=1,
        max_size=400,
    ),
    st.integers(min_value=6, max_value=60),
)
def test_any_text_fits_and_keeps_every_character(text: str, budget: int) -> None:
    if not text.strip():
        assert split_for_speech(text, budget, utf8) == []
        return
    check(text, budget, utf8)
