"""Fixtures shared by the unit tests: the Responses stores a test opens, closed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ovserve.dialects.openai.responses.store import ResponseStore


def stored_response(response_id: str, text: str = "") -> dict[str, str]:
    """A minimal Responses API object to store."""
    return {"id": response_id, "object": "response", "text": text}


@pytest.fixture
def stores() -> Iterator[list[ResponseStore]]:
    """The stores a test opened (it appends them): each closed after the test."""
    opened: list[ResponseStore] = []
    yield opened
    for store in opened:
        store.close()
