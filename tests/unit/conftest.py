"""Fixtures shared by the unit tests: the Responses stores a test opens, closed after it
(the session's PostgreSQL server is ``postgres`` in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ovserve.dialects.openai.responses.backends import Store


def stored_response(response_id: str, text: str = "") -> dict[str, str]:
    """A minimal Responses API object to store."""
    return {"id": response_id, "object": "response", "text": text}


@pytest.fixture
async def stores() -> AsyncIterator[list[Store]]:
    """The stores a test opened (it appends them): each closed after the test."""
    opened: list[Store] = []
    yield opened
    for store in opened:
        await store.aclose()
