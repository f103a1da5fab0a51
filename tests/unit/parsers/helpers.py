"""Feed literal model output to an extractor whole, and split at every position."""

from __future__ import annotations

from ovserve.parsers.base import Extracted, ToolCallExtractor, ToolCallFormat


def run(fmt: ToolCallFormat, pieces: list[str]) -> tuple[str, list[tuple[str, dict]]]:
    extractor = ToolCallExtractor(fmt)
    outputs: list[Extracted] = [extractor.push(piece) for piece in pieces]
    outputs.append(extractor.finish())
    content = "".join(out.content for out in outputs)
    calls = [(call.name, call.arguments) for out in outputs for call in out.tool_calls]
    return content, calls


def every_split(fmt: ToolCallFormat, text: str) -> list[tuple[str, list[tuple[str, dict]]]]:
    """The result for the whole text, then for each two-piece and char-by-char split."""
    results = [run(fmt, [text]), run(fmt, list(text))]
    results += [run(fmt, [text[:cut], text[cut:]]) for cut in range(1, len(text))]
    return results


def assert_same_everywhere(fmt: ToolCallFormat, text: str, content: str, calls: list[tuple[str, dict]]) -> None:
    for got_content, got_calls in every_split(fmt, text):
        assert got_calls == calls
        assert got_content == content
