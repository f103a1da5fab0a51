from __future__ import annotations

import pytest

from ovserve.core.stop import StopTrimmer

TEXT = "The quick brown fox jumps over the lazy dog"


def feed(trimmer: StopTrimmer, pieces: list[str]) -> str:
    out = []
    for piece in pieces:
        out.append(trimmer.push(piece))
        if trimmer.stopped:
            break
    else:
        out.append(trimmer.flush())
    return "".join(out)


@pytest.mark.parametrize("split", range(1, len(TEXT)))
def test_stop_found_wherever_the_text_is_split(split: int) -> None:
    pieces = [TEXT[:split], TEXT[split:]]
    assert feed(StopTrimmer(["fox"], include_stop=False), pieces) == "The quick brown "
    assert feed(StopTrimmer(["fox"], include_stop=True), pieces) == "The quick brown fox"


def test_character_by_character_stream_trims_exactly() -> None:
    trimmer = StopTrimmer(["lazy", "jumps"], include_stop=False)
    assert feed(trimmer, list(TEXT)) == "The quick brown fox "
    assert trimmer.stopped


def test_no_stop_passes_text_through_unchanged() -> None:
    trimmer = StopTrimmer([], include_stop=False)
    assert trimmer.push("abc") == "abc"
    assert feed(StopTrimmer(["zzz"], include_stop=False), list(TEXT)) == TEXT


def test_text_after_a_stop_is_dropped() -> None:
    trimmer = StopTrimmer(["o"], include_stop=True)
    assert trimmer.push("hello world") == "hello"
    assert trimmer.push("more") == ""


def test_the_stop_sequence_found_is_named() -> None:
    trimmer = StopTrimmer(["END", "STOP"], include_stop=False)
    assert trimmer.push("one ST") == "one"
    assert trimmer.push("OP two") == " "
    assert trimmer.stopped and trimmer.matched == "STOP"
