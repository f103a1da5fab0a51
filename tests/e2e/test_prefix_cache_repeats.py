"""A resent prompt is served from the prefix cache, and reported so, every time.

The engine's KV cache grows on demand (``cache_size`` 0): a prompt longer than any before it grows
the cache inside the step that prefills it. The engine's model of its cache
(``ovserve/engine/prefix_cache.py``) used to learn the new size only at the next heartbeat, so it
evicted the prompt's oldest blocks (its first ones) as soon as it remembered them, and reported
``cached_tokens`` 0 for the identical request that followed, which the engine served from its
cache all the same. On a shared server that was about 2 of 7 repeats; on a fresh one, every
prompt longer than the ones before it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from tests.conftest import start_server

BLOCK = 32


def _cached(url: str, content: str) -> tuple[int, int]:
    body = {"model": "tiny-llm", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    usage = httpx.post(f"{url}/v3/chat/completions", json=body, timeout=120).json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def test_the_first_repeat_of_a_prompt_is_served_from_the_cache_every_time(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm)
    try:
        # Fresh server: its cache holds one block. Each prompt is longer than every one before it,
        # so each grows the cache: the case that was always missed.
        for repeat in range(12):
            content = f"conversation {uuid.uuid4().hex}: " + " ".join(["rivers and mountains"] * (10 + 12 * repeat))
            prompt_tokens, first = _cached(server.url, content)
            again_tokens, again = _cached(server.url, content)
            assert again_tokens == prompt_tokens
            assert first < 2 * BLOCK, (repeat, prompt_tokens, first)  # the uuid is new to the cache
            whole_blocks = min(prompt_tokens // BLOCK * BLOCK, prompt_tokens - 1)
            assert again == whole_blocks, (repeat, prompt_tokens, again)
    finally:
        server.stop()
