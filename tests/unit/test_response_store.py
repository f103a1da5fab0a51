"""The Responses conversation store: bounds, least-recently-used eviction, persistence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ovserve.service.response_store import DISABLED, MEMORY, ResponseStore


def response(response_id: str, text: str = "") -> dict[str, str]:
    return {"id": response_id, "object": "response", "text": text}


@pytest.fixture
def stores() -> Iterator[list[ResponseStore]]:
    opened: list[ResponseStore] = []
    yield opened
    for store in opened:
        store.close()


def open_store(stores: list[ResponseStore], location: str = MEMORY, **bounds: int) -> ResponseStore:
    store = ResponseStore(location, max_count=bounds.get("max_count", 100), max_bytes=bounds.get("max_bytes", 10**6))
    stores.append(store)
    return store


async def test_a_stored_response_comes_back_with_its_conversation(stores) -> None:
    store = open_store(stores)
    conversation = [{"role": "user", "content": "hi"}, {"type": "message", "role": "assistant", "content": []}]
    await store.put(response("resp_1"), conversation)
    stored = await store.get("resp_1")
    assert stored is not None and stored.response == response("resp_1") and stored.conversation == conversation
    assert await store.get("resp_unknown") is None


async def test_count_bound_evicts_the_least_recently_used(stores) -> None:
    store = open_store(stores, max_count=3)
    for name in ("a", "b", "c"):
        await store.put(response(name), [])
    assert await store.get("a") is not None  # a is now more recent than b
    await store.put(response("d"), [])
    assert await store.get("b") is None
    assert [await store.get(name) is not None for name in ("a", "c", "d")] == [True, True, True]
    assert (await store.stats())[0] == 3


async def test_byte_bound_evicts_until_the_total_fits(stores) -> None:
    store = open_store(stores, max_bytes=3_000)
    for index in range(5):
        await store.put(response(f"r{index}", "x" * 900), [])
    count, size = await store.stats()
    assert size <= 3_000 and count == 3
    assert await store.get("r0") is None and await store.get("r4") is not None


async def test_delete_removes_only_that_response(stores) -> None:
    store = open_store(stores)
    await store.put(response("a"), [])
    await store.put(response("b"), [])
    assert await store.delete("a") is True
    assert await store.delete("a") is False
    assert await store.get("a") is None and await store.get("b") is not None


async def test_a_file_store_survives_a_reopen_and_applies_new_bounds(stores, tmp_path: Path) -> None:
    path = str(tmp_path / "sub" / "responses.db")
    first = open_store(stores, path)
    for name in ("a", "b", "c"):
        await first.put(response(name), [{"n": name}])
    await first.get("a")
    first.close()
    reopened = open_store(stores, path, max_count=2)  # smaller bounds: the LRU row goes at once
    assert (await reopened.stats())[0] == 2
    assert await reopened.get("b") is None
    stored = await reopened.get("a")
    assert stored is not None and stored.conversation == [{"n": "a"}]
    # The LRU clock continues where it stopped: c, not a (just read), is the next to go.
    await reopened.put(response("d"), [])
    assert await reopened.get("c") is None and await reopened.get("a") is not None


def test_none_is_a_disabled_store(stores) -> None:
    assert open_store(stores, DISABLED).enabled is False
    assert open_store(stores).enabled is True
