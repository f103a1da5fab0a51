"""The ``embeddings`` workload: embeddings/s for batches of 1, 8 and 64 inputs of 128 tokens.

The raw side is the ``TextEmbeddingPipeline`` the engine builds for the same flags
(``ovserve.engine.pipelines.build_pipeline``, which wraps it in ``ovserve.engine.retrieval.Embedder``),
called in this process with each whole batch, as a user of the pipeline would call it. The server
side sends the same batches, one request after another, to ``POST /v3/embeddings``. Each level
embeds ``--embed_inputs`` inputs in all (at least four batches), every input distinct, so the ratio
compares the same work.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ovserve.engine.spec import EngineSpec

from .measure import Figures, ms, percentile
from .server import MODEL_NAME, client_session
from .workloads import WORDS, Context, Options, Workload


def _text_of(tokenizer: Any, seed: int, tokens: int) -> str:
    """Words (rotated by ``seed``) that the model's tokenizer spells in ``tokens`` tokens or just fewer,
    special tokens included."""

    def build(count: int) -> str:
        return f"input {seed}: " + " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(count))

    def length(text: str) -> int:
        return int(tokenizer.encode(text, add_special_tokens=True).input_ids.shape[1])

    low, high = 1, tokens
    while low < high:
        middle = (low + high + 1) // 2
        if length(build(middle)) <= tokens:
            low = middle
        else:
            high = middle - 1
    return build(low)


class Embeddings(Workload):
    name = "embeddings"
    description = (
        "batches of --embed_batches (1, 8, 64) inputs of --embed_tokens (128) tokens, sent one after another; "
        "--embed_inputs (256) inputs per level"
    )
    headline = "emb_s"
    columns = (("emb_s", "embeddings/s"), ("batch_p50_ms", "batch p50 ms"), ("batch_p95_ms", "batch p95 ms"))
    retrieval = True
    server_args = "--task embeddings --pooling MEAN"

    def __init__(self) -> None:
        self.model_dir: Path | None = None  # the embedding model (set by scripts/benchmark.py)
        self._texts: dict[int, list[str]] = {}

    def levels(self, options: Options) -> list[int]:
        return options.embed_batches

    def batches(self, context: Context, level: int) -> list[list[str]]:
        """Distinct inputs, in batches of ``level``; built once per level (the tokenizer's binary search)."""
        if level not in self._texts:
            import openvino_genai as ov_genai

            assert self.model_dir is not None, "set the embedding model's directory first"
            tokenizer = ov_genai.Tokenizer(str(self.model_dir))
            count = max(context.options.embed_inputs, 4 * level)
            self._texts[level] = [_text_of(tokenizer, seed, context.options.embed_tokens) for seed in range(count)]
        texts = self._texts[level]
        return [texts[start : start + level] for start in range(0, len(texts) - level + 1, level)]

    def run_raw(self, context: Context, spec: EngineSpec, level: int) -> Figures:
        from ovserve.engine.pipelines import build_pipeline

        pipeline = build_pipeline(spec).pipeline
        batches = self.batches(context, level)
        pipeline.embed_documents(batches[0])  # warm-up: first inference compiles for the shape
        times = []
        start = time.perf_counter()
        for batch in batches:
            sent = time.perf_counter()
            pipeline.embed_documents(batch)
            times.append(time.perf_counter() - sent)
        return _figures(times, time.perf_counter() - start, level)

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        batches = self.batches(context, level)
        async with client_session() as session:

            async def embed(batch: list[str]) -> None:
                body = {"model": MODEL_NAME, "input": batch, "encoding_format": "base64"}  # the SDK default
                async with session.post(f"{url}/v3/embeddings", json=body) as response:
                    payload = await response.json()
                    if response.status != 200 or len(payload["data"]) != len(batch):
                        raise RuntimeError(f"embeddings request failed ({response.status}): {payload}")

            await embed(batches[0])  # warm-up, as the raw side
            times = []
            start = time.perf_counter()
            for batch in batches:
                sent = time.perf_counter()
                await embed(batch)
                times.append(time.perf_counter() - sent)
        return _figures(times, time.perf_counter() - start, level)


def _figures(times: list[float], wall_s: float, level: int) -> Figures:
    return {
        "emb_s": len(times) * level / wall_s if wall_s > 0 else None,
        "batch_p50_ms": ms(percentile(times, 50)),
        "batch_p95_ms": ms(percentile(times, 95)),
        "wall_s": wall_s,
    }
