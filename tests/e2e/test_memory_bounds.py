"""Memory that a client's inputs must not grow without bound, read from /proc on real servers.

- The server process: requests of new 1,000-letter words (each a new word for the prompt
  tokenizer's BPE word cache, which kept up to 20,000 of them, ~4.7 KiB each) must not grow it
  between the 2,000th and the 4,000th (issue 33: < 2 MiB).
- The embedding engine: batches of 1-8 random strings of random lengths (every input shape a new
  set of JIT kernels unless the CPU plugin's caches are bounded) must level off: < 5 % over the
  second half of 6,000 requests, within the bound docs/operations.md states (slow: minutes).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ovserve.engine.memory import resident_memory_bytes
from scripts.soak import random_string
from tests.conftest import Server, start_server

MIB = 1 << 20
CLIENTS = 4
# docs/operations.md, "What an engine's memory is made of": the tiny-embed engine's plateau.
EMBED_ENGINE_BOUND_MIB = 300


def _rss(pid: int) -> int:
    rss = resident_memory_bytes(pid)
    assert rss is not None, f"process {pid} is gone"
    return rss


def _send(count: int, request: Callable[[httpx.Client, int], None], start: int) -> None:
    with httpx.Client(timeout=120) as http, ThreadPoolExecutor(CLIENTS) as pool:
        for _ in pool.map(lambda index: request(http, index), range(start, start + count)):
            pass


def test_new_long_words_do_not_grow_the_server(tiny_llm: Path, tmp_path: Path) -> None:
    server = start_server(tmp_path, tiny_llm)
    rng = random.Random(33)
    words = ["".join(rng.choices(string.ascii_letters, k=1000)) for _ in range(4000)]

    def chat(http: httpx.Client, index: int) -> None:
        body = {
            "model": "tiny-llm",
            "messages": [{"role": "user", "content": f"Spell {words[index]} backwards."}],
            "max_tokens": 1,
        }
        response = http.post(f"{server.url}/v3/chat/completions", json=body)
        assert response.status_code == 200, response.text

    try:
        _send(2000, chat, 0)
        at_2000 = _rss(server.process.pid)
        _send(2000, chat, 2000)
        at_4000 = _rss(server.process.pid)
    finally:
        server.stop()
    print(f"server RSS: {at_2000 / MIB:.1f} MiB at 2,000 requests, {at_4000 / MIB:.1f} MiB at 4,000")
    assert at_4000 - at_2000 < 2 * MIB


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 6,000 requests: ~6 min on 2 shared cores
def test_the_embedding_engine_levels_off_on_varied_shapes(retrieval_models: dict[str, Path], tmp_path: Path) -> None:
    server: Server = start_server(
        tmp_path, retrieval_models["tiny-embed"], "--task", "embeddings", "--pooling", "MEAN", model_name="tiny-embed"
    )
    (engine,) = server.engine_pids()

    def embed(http: httpx.Client, index: int) -> None:
        rng = random.Random(index)
        # 500 ASCII characters are at most 500 tokens: within the 512-token limit with [CLS], [SEP].
        texts = [random_string(rng, 500) for _ in range(rng.randint(1, 8))]
        response = http.post(f"{server.url}/v3/embeddings", json={"model": "tiny-embed", "input": texts})
        assert response.status_code == 200, response.text

    try:
        loaded = _rss(engine)
        _send(3000, embed, 0)
        at_3000 = _rss(engine)
        _send(3000, embed, 3000)
        at_6000 = _rss(engine)
    finally:
        server.stop()
    print(f"engine RSS: {loaded / MIB:.0f} MiB loaded, {at_3000 / MIB:.0f} at 3,000, {at_6000 / MIB:.0f} at 6,000")
    assert (at_6000 - at_3000) / at_3000 < 0.05
    assert at_6000 < EMBED_ENGINE_BOUND_MIB * MIB
