#!/usr/bin/env python3
"""Retrieval throughput side by side, in one process: rerank drivers and inference precisions.

Rerank (documents/s): openvino_genai's ``TextRerankPipeline`` as the engine called it before
(``pipeline``, the plugin's default precision: bf16 on a CPU with native bf16) and at f32, against
the engine's own cross-encoder (``ovserve.engine.retrieval.CrossEncoder``) at f32 (its default) and
bf16. Embeddings (texts/s): ``TextEmbeddingPipeline`` at the plugin default and at f32. Every
variant scores the same distinct texts in calls of ``--batch`` (32, the engine's default
``embeddings_batch_size``); the variants take turns call by call, for ``--rounds`` rounds, and each
figure is the median of the rounds. Documents are longer than the query, so the pipeline's paired-tokenizer fault (see
``ovserve.engine.retrieval``) stays out of the measurement. ``distinct`` counts the different
scores the first call returned: ties from a low precision show there.

    python scripts/bench_retrieval.py                                  # the tiny demo models
    python scripts/bench_retrieval.py --rerank_model models/bench-bert-base-rerank \\
        --embed_model models/bench-bert-base-embed --json docs/benchmarks/retrieval.json
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    *("the", "sea", "is", "calm", "tonight", "import", "os", "sys", "def", "return", "value", "python"),
    *("language", "snakes", "live", "in", "grass", "server", "model", "engine", "request", "batch", "token"),
    *("query", "document", "score", "order", "index", "file", "path", "data"),
]


def _texts(count: int, words: int, seed: int) -> list[str]:
    return [
        f"text {seed}-{n}: " + " ".join(WORDS[(n * 7 + i * 3 + seed) % len(WORDS)] for i in range(words))
        for n in range(count)
    ]


def _rerankers(model_dir: Path, max_length: int, batch: int) -> dict[str, Callable[[str, list[str]], list[float]]]:
    import openvino_genai as ov_genai

    from ovserve.engine.retrieval import CrossEncoder, build_retrieval_model
    from ovserve.engine.spec import EngineSpec, PipelineKind

    def pipeline(**properties: str) -> Callable[[str, list[str]], list[float]]:
        config = ov_genai.TextRerankPipeline.Config()
        config.top_n = batch
        config.max_length = max_length
        pipe = ov_genai.TextRerankPipeline(str(model_dir), "CPU", config, **properties)
        return lambda query, documents: [score for _, score in pipe.rerank(query, documents)]

    spec = EngineSpec("bench", model_dir, kind=PipelineKind.RERANK, max_input_tokens=max_length)
    f32, bf16 = (
        build_retrieval_model(spec),
        build_retrieval_model(replace(spec, plugin_config={"INFERENCE_PRECISION_HINT": "bf16"})),
    )
    assert isinstance(f32, CrossEncoder) and isinstance(bf16, CrossEncoder)
    return {
        "pipeline (plugin default)": pipeline(),
        "pipeline f32": pipeline(INFERENCE_PRECISION_HINT="f32"),
        "cross-encoder f32 (engine default)": f32.score,
        "cross-encoder bf16": bf16.score,
    }


def _embedders(model_dir: Path, max_length: int) -> dict[str, Callable[[list[str]], Any]]:
    import openvino_genai as ov_genai

    def pipeline(**properties: str) -> Callable[[list[str]], Any]:
        config = ov_genai.TextEmbeddingPipeline.Config()
        config.pooling_type = ov_genai.TextEmbeddingPipeline.PoolingType.MEAN
        config.normalize = True
        config.max_length = max_length
        return ov_genai.TextEmbeddingPipeline(str(model_dir), "CPU", config, **properties).embed_documents

    return {
        "embedding pipeline (plugin default)": pipeline(),
        "embedding pipeline f32 (engine default)": pipeline(INFERENCE_PRECISION_HINT="f32"),
    }


def _run(calls: dict[str, Callable[[list[str]], Any]], items: list[str], batch: int, rounds: int) -> dict[str, Any]:
    """Each variant's texts/s. The variants take turns call by call (in a rotating order), so a
    neighbour's load on the shared cores falls on all of them alike."""
    if not calls:
        return {}
    batches = [items[start : start + batch] for start in range(0, len(items), batch)]
    names = list(calls)
    distinct: dict[str, int] = {}
    for name, call in calls.items():  # warm-up: the first inference compiles for its shapes
        first = call(batches[0])
        distinct[name] = len({round(float(value), 9) for value in first}) if isinstance(first[0], float) else -1
    rates: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        for index, part in enumerate(batches):
            shift = (round_ + index) % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                calls[name](part)
                spent[name] += time.perf_counter() - started
        for name in names:
            rates[name].append(len(items) / spent[name])
    return {
        name: {"per_s": statistics.median(values), "all_per_s": values, "distinct_in_first_call": distinct[name]}
        for name, values in rates.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rerank_model", type=Path, default=ROOT / "models" / "tiny-rerank")
    parser.add_argument("--embed_model", type=Path, default=ROOT / "models" / "tiny-embed")
    parser.add_argument("--documents", type=int, default=128, help="documents (texts) per round and variant")
    parser.add_argument("--query_words", type=int, default=10)
    parser.add_argument("--document_words", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="texts per call (the engine's embeddings_batch_size)")
    parser.add_argument("--max_length", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="run only the variants whose name matches this regex")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    import openvino as ov

    query = _texts(1, args.query_words, seed=1)[0]
    documents = _texts(args.documents, args.document_words, seed=2)
    wanted = re.compile(args.only or "")
    rerankers = _rerankers(args.rerank_model, args.max_length, args.batch)
    rerank_calls = {name: (lambda part, score=score: score(query, part)) for name, score in rerankers.items()}
    embed_calls = _embedders(args.embed_model, args.max_length)
    rerank = _run({k: v for k, v in rerank_calls.items() if wanted.search(k)}, documents, args.batch, args.rounds)
    embed = _run({k: v for k, v in embed_calls.items() if wanted.search(k)}, documents, args.batch, args.rounds)
    core = ov.Core()
    report = {
        "machine": {
            "cpu": core.get_property("CPU", "FULL_DEVICE_NAME"),
            "default_precision": str(core.get_property("CPU", "INFERENCE_PRECISION_HINT")),
            "python": platform.python_version(),
            "openvino": ov.get_version(),
        },
        "settings": {key: str(value) for key, value in vars(args).items() if key != "json"},
        "rerank_documents": rerank,
        "embeddings_texts": embed,
    }
    print(f"CPU {report['machine']['cpu']}, plugin default precision {report['machine']['default_precision']}")
    print(f"{args.documents} texts of ~{args.document_words} words in calls of {args.batch}, median of {args.rounds}")
    print("| variant | per s | distinct scores in the first call |")
    print("|---|---|---|")
    for section in (rerank, embed):
        for name, figures in section.items():
            distinct = figures["distinct_in_first_call"]
            print(f"| {name} | {figures['per_s']:.1f} | {distinct if distinct >= 0 else ''} |")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
