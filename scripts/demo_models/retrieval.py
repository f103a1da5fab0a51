"""Random BERT retrieval models: tiny-embed, tiny-rerank and the BERT-base-shaped benchmark models.

BERT-shaped, as the sentence-transformers models OVMS's embeddings demo serves, with the WordPiece
tokenizer (``[CLS] text [SEP]``, and ``[CLS] query [SEP] document [SEP]`` for the pairs a reranker
scores). The embedding model is served with MEAN pooling and normalisation (OVMS's documented setup
for e.g. all-MiniLM-L6-v2); the reranker is a ``BertForSequenceClassification`` with one label,
whose score the pipeline passes through a sigmoid.

Contract: ``RetrievalSpec`` is a ``build.DemoModel``; its export is fp16 and is checked for the model
and tokenizer IRs only (the server reads no generation config or chat template for these).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from scripts.demo_models.common import SEED, require_files
from scripts.demo_models.tokenizer import Tokenizers, bert_tokenizer_class

RETRIEVAL_MODELS_VERSION = "ovserve-retrieval-models/1"
TINY_EMBED = "tiny-embed"
TINY_RERANK = "tiny-rerank"
BENCH_EMBED = "bench-bert-base-embed"
BENCH_RERANK = "bench-bert-base-rerank"
# optimum-intel export task of each kind.
_TASKS = {"embeddings": "feature-extraction", "rerank": "text-classification"}


@dataclass(frozen=True)
class RetrievalSpec:
    version: ClassVar[str] = RETRIEVAL_MODELS_VERSION
    weight_format: ClassVar[str] = "fp16"

    name: str
    kind: Literal["embeddings", "rerank"]
    hidden_size: int
    layers: int
    heads: int
    max_position_embeddings: int = 512
    # A random classifier head scores every pair ~0.5; a wider one spreads the scores, so that
    # sorting by relevance is visible in tests.
    classifier_std: float = 2.0

    @property
    def task(self) -> str:
        return _TASKS[self.kind]

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.wordpiece

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        """Save a seeded random BERT (``BertModel``, or a one-label ``BertForSequenceClassification`` for
        a reranker) plus the tokenizer to ``hf_dir``: what a user would download from the Hub."""
        import torch
        from transformers import BertConfig, BertForSequenceClassification, BertModel

        tokenizer = bert_tokenizer_class().from_pretrained(str(tokenizer_dir))
        torch.manual_seed(SEED)
        shape: dict[str, Any] = {  # BertConfig's keyword arguments are untyped (**kwargs)
            "vocab_size": len(tokenizer),
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "intermediate_size": self.hidden_size * 4,
            "max_position_embeddings": self.max_position_embeddings,
            "pad_token_id": tokenizer.pad_token_id,
        }
        config = BertConfig(**shape)
        model: Any
        if self.kind == "rerank":
            config.num_labels = 1
            model = BertForSequenceClassification(config).eval()
            with torch.no_grad():
                model.classifier.weight.normal_(0.0, self.classifier_std)
        else:
            model = BertModel(config, add_pooling_layer=False).eval()
        model.save_pretrained(str(hf_dir))
        tokenizer.save_pretrained(str(hf_dir))
        return hf_dir

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        require_files(ov_dir, ("openvino_model.xml", "openvino_tokenizer.xml"))


TINY_EMBED_SPEC = RetrievalSpec(TINY_EMBED, "embeddings", hidden_size=64, layers=2, heads=4)
TINY_RERANK_SPEC = RetrievalSpec(TINY_RERANK, "rerank", hidden_size=64, layers=2, heads=4)
# BERT-base shape (110M parameters with a real vocabulary; ~88M here), fp16: the embeddings benchmark.
BENCH_EMBED_SPEC = RetrievalSpec(BENCH_EMBED, "embeddings", hidden_size=768, layers=12, heads=12)
# The same shape with a one-label head (bge-reranker-base's size class): the rerank benchmark.
BENCH_RERANK_SPEC = RetrievalSpec(BENCH_RERANK, "rerank", hidden_size=768, layers=12, heads=12)
