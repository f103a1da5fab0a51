"""The engine's retrieval models (ovserve.engine.retrieval) against openvino_genai's pipelines.

The cross-encoder must score as ``TextRerankPipeline`` does at the same precision (same pair ids,
truncation and head), without the pipeline's paired-tokenizer fault: the pipeline is only given
inputs that stay clear of it (documents no shorter than the query, at most two per call).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ovserve.engine.retrieval import CrossEncoder, Embedder, build_retrieval_model, retrieval_properties, truncate_pair
from ovserve.engine.spec import EngineSpec, PipelineKind

WORDS = [
    *("python", "is", "a", "language", "snakes", "live", "in", "the", "grass", "the", "sea"),
    *("import", "os", "def", "main", "pass", "alpha", "beta", "gamma"),
]


def _spec(model_dir: Path, kind: PipelineKind, max_length: int = 512, **plugin_config: str) -> EngineSpec:
    return EngineSpec("m", model_dir, kind=kind, max_input_tokens=max_length, plugin_config=plugin_config)


@functools.cache
def _rerank_pipeline(model_dir: Path, max_length: int, top_n: int) -> Any:
    """One compiled pipeline per configuration: compiling it is most of what a rerank call costs."""
    import openvino_genai as ov_genai

    config = ov_genai.TextRerankPipeline.Config()
    config.top_n = top_n
    config.max_length = max_length
    return ov_genai.TextRerankPipeline(str(model_dir), "CPU", config, INFERENCE_PRECISION_HINT="f32")


def _pipeline_scores(model_dir: Path, max_length: int, query: str, documents: list[str]) -> list[float]:
    pipeline = _rerank_pipeline(model_dir, max_length, len(documents))
    scores = [0.0] * len(documents)
    for index, score in pipeline.rerank(query, documents):
        scores[index] = score
    return scores


@pytest.mark.parametrize("max_length", [512, 16, 17, 9])
def test_cross_encoder_scores_equal_the_rerank_pipeline_at_f32(
    retrieval_models: dict[str, Path], max_length: int
) -> None:
    model_dir = retrieval_models["tiny-rerank"]
    ours = build_retrieval_model(_spec(model_dir, PipelineKind.RERANK, max_length))
    assert isinstance(ours, CrossEncoder)
    rng = np.random.default_rng(max_length)
    for _ in range(8):
        query = " ".join(rng.choice(WORDS, rng.integers(1, 6)))
        # Long documents beside short queries: inputs the pipeline scores without faulting; a small
        # max_length makes both sides of the pair truncation run.
        documents = [" ".join(rng.choice(WORDS, rng.integers(6, 40))) for _ in range(2)]
        want = _pipeline_scores(model_dir, max_length, query, documents)
        assert ours.score(query, documents) == pytest.approx(want, abs=1e-6)


def test_cross_encoder_scores_the_inputs_that_broke_the_pipeline(retrieval_models: dict[str, Path]) -> None:
    """(documents - 2) x query tokens over the documents' tokens overran the paired tokenizer's
    buffer; the fuzzer found it with punctuation and unassigned code points (many tokens per
    character), but plain words do it too. Each such call killed the engine process."""
    ours = build_retrieval_model(_spec(retrieval_models["tiny-rerank"], PipelineKind.RERANK))
    cases = [
        ("what is the capital city of france please", ["a", "b", "c"]),
        ("\u78c7^\u00cf#", ["\u00a6", "\u00af", "\u00fc"]),
        ("!\U000e0fff\U000f0000?" * 20, ["\x17", "x", "\u200b\x0f", "y"] * 10),
    ]
    for query, documents in cases:
        scores = ours.score(query, documents)
        assert len(scores) == len(documents)
        assert all(0.0 < score < 1.0 for score in scores)
        # The same pair alone scores the same: every row is built on its own.
        assert ours.score(query, documents[:1]) == pytest.approx(scores[:1], abs=1e-6)


def test_pair_truncation_follows_the_tokenizers_rule() -> None:
    assert truncate_pair(6, 66, 13) == (6, 7)  # the short one kept whole
    assert truncate_pair(66, 8, 13) == (7, 6)  # both over half: halves, the spare token to the longer
    assert truncate_pair(18, 20, 13) == (6, 7)
    assert truncate_pair(3, 4, 13) == (3, 4)
    assert truncate_pair(443, 883, 509) == (254, 255)


def test_embedding_control_characters_only_gives_one_vector_per_input(retrieval_models: dict[str, Path]) -> None:
    """The pipeline answers a batch whose every text normalizes to nothing with a single vector."""
    embedder = build_retrieval_model(_spec(retrieval_models["tiny-embed"], PipelineKind.EMBEDDINGS))
    assert isinstance(embedder, Embedder)
    assert len(embedder.pipeline.embed_documents(["\x17", "\x0f"])) == 1  # the pipeline's quirk
    vectors = embedder.embed(["\x17", "\x0f"])
    assert vectors.shape[0] == 2
    assert np.allclose(vectors[0], embedder.embed(["\x17"])[0])


def test_retrieval_models_run_in_f32_unless_the_plugin_config_says() -> None:
    spec = _spec(Path("m"), PipelineKind.RERANK)
    assert retrieval_properties(spec)["INFERENCE_PRECISION_HINT"] == "f32"
    chosen = _spec(Path("m"), PipelineKind.RERANK, INFERENCE_PRECISION_HINT="bf16", NUM_STREAMS="1")
    assert retrieval_properties(chosen) == {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "1"}
    npu = EngineSpec("m", Path("m"), device="NPU", kind=PipelineKind.EMBEDDINGS, max_input_tokens=8)
    assert "INFERENCE_PRECISION_HINT" not in retrieval_properties(npu)
