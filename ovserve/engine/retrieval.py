"""The retrieval models of an engine process: a cross-encoder driven directly, and the embedding pipeline.

:func:`build_retrieval_model` gives :class:`~ovserve.engine.worker.RetrievalEngineLoop` an
:class:`Embedder` (``embed``: one float32 vector per text) or a reranker (``score``: one relevance
per document, in document order). The loop splits requests into calls of its batch size.

Why the cross-encoder is not ``openvino_genai.TextRerankPipeline``: the pipeline tokenizes a batch
as pairs with a tokenizer whose second input openvino_tokenizers' ``add_second_input`` grafts on,
and passes the query once, to be broadcast against the documents. The graft's ``CombineSegments``
sizes its output from the flat token buffer, which holds the query's tokens once, but writes them
once per document: whenever ``(documents - 2) x query tokens`` exceeds the documents' tokens (a
13-token query beside three one-token documents is enough), it writes past its buffer. The heap
is corrupted and the engine process dies (``free(): invalid pointer``, SIGSEGV), failing every
request in flight; the check that would catch it runs after the writes.

:class:`CrossEncoder` never builds that graph. It compiles the model's ``openvino_tokenizer.xml``
as it was exported (one text per row: every row's tokens are its own, so the output estimate always
holds), tokenizes the query and the documents as single texts, and builds each pair itself from the
tokenizer's post-processor template (``[CLS] query [SEP] document [SEP]`` for BERT), truncated to
``max_length`` with the pair ``Truncate`` rule the pipeline's tokenizer applies (longest first,
right side: the same ids, so the same scores). The score is the pipeline's head: a sigmoid of a
one-logit model, else the softmax's class 1.

Decoder rerankers (``model_type`` qwen3, or a stateful ``beam_idx`` model) keep the pipeline
(:class:`PipelineReranker`): it scores them from ``query + document`` strings through the plain
one-input tokenizer, a path the fault above does not touch, with a head of its own.

Precision: on a CPU with native bf16 (AVX-512 BF16, AMX) OpenVINO infers in bf16 unless told
otherwise, and a reranker's sigmoid then has 8 bits of mantissa: nearby relevances collapse into
one value (0.83984375 for four of five documents of the demo reranker), and their order becomes
arbitrary. Retrieval models are compiled with ``INFERENCE_PRECISION_HINT: f32`` on CPU and GPU
unless the model's ``plugin_config`` names a precision (:func:`retrieval_properties`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.json_types import JsonObject

log = logging.getLogger("ovserve.engine")

PRECISION_HINT = "INFERENCE_PRECISION_HINT"
# Devices whose plugin takes an f32 hint (an NPU computes in f16 only; AUTO/HETERO pass properties on).
_F32_DEVICES = ("CPU", "GPU")

TOKENIZER_FILE = "openvino_tokenizer.xml"
MODEL_FILE = "openvino_model.xml"

# OVMS's pooling names -> TextEmbeddingPipeline.PoolingType members.
_POOLING = {"CLS": "CLS", "LAST": "LAST_TOKEN", "MEAN": "MEAN"}


def retrieval_properties(spec: EngineSpec) -> JsonObject:
    """The OpenVINO properties a retrieval model is compiled with: the graph's ``plugin_config``,
    plus an f32 inference precision on CPU and GPU when the graph chooses none (see the module
    docstring: bf16/f16 ties a reranker's nearby scores)."""
    properties: JsonObject = dict(spec.plugin_config)
    if PRECISION_HINT not in properties and spec.device.upper().startswith(_F32_DEVICES):
        properties[PRECISION_HINT] = "f32"
    return properties


class Embedder:
    """``TextEmbeddingPipeline``: its one-input tokenizer never meets the pair fault; kept as it is."""

    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        embedding = ov_genai.TextEmbeddingPipeline
        config = embedding.Config()
        config.pooling_type = getattr(embedding.PoolingType, _POOLING[spec.retrieval.pooling])
        config.normalize = spec.retrieval.normalize_embeddings
        # Inputs are checked (or, with truncate, meant to be cut) against this limit by the server.
        config.max_length = spec.max_input_tokens
        self.pipeline = embedding(str(spec.model_path), spec.device, config, **retrieval_properties(spec))

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim], in input order."""
        vectors = np.asarray(self.pipeline.embed_documents(texts), dtype=np.float32)
        if len(vectors) != len(texts):
            # A batch whose every text normalizes to nothing (control characters) tokenizes to a
            # single row: one vector came back for all of them. Each alone gets its own.
            return np.concatenate([self.embed([text]) for text in texts])
        return vectors


class Reranker(Protocol):
    def score(self, query: str, documents: list[str]) -> list[float]:
        """The relevance of each document to ``query``, in document order."""
        ...


@dataclass(frozen=True)
class PairTemplate:
    """Where a tokenizer puts its special tokens (openvino_tokenizers' ``processed_post_processor_template``).

    ``single`` and ``pair`` are token ids, with -1 (and, in a pair, -2) where the texts go;
    ``*_types`` the token type id of each entry. ``pair`` is None when the tokenizer has none: the
    query and the document are then read as one text, as the pipeline does for such tokenizers.
    """

    single: tuple[int, ...]
    single_types: tuple[int, ...]
    pair: tuple[int, ...] | None
    pair_types: tuple[int, ...] | None

    @property
    def prefix(self) -> int:
        """Special tokens before a single text."""
        return self.single.index(-1)

    @property
    def suffix(self) -> int:
        """Special tokens after a single text."""
        return len(self.single) - self.single.index(-1) - 1

    @property
    def pair_specials(self) -> int:
        assert self.pair is not None
        return sum(1 for token in self.pair if token >= 0)

    @classmethod
    def from_rt_info(cls, text: str | None) -> PairTemplate | None:
        if not text:
            return None
        try:
            template = json.loads(text)
            single = tuple(int(token) for token in template["single"]["ids"])
            single_types = tuple(int(kind) for kind in template["single"]["type_ids"])
            pair = template.get("pair")
            pair_ids = tuple(int(token) for token in pair["ids"]) if pair else None
            pair_types = tuple(int(kind) for kind in pair["type_ids"]) if pair else None
        except (ValueError, KeyError, TypeError):
            return None
        if single.count(-1) != 1 or len(single_types) != len(single):
            return None
        if pair_ids is not None and (
            sorted(t for t in pair_ids if t < 0) != [-2, -1] or len(pair_types or ()) != len(pair_ids)
        ):
            return None
        return cls(single, single_types, pair_ids, pair_types)


def truncate_pair(first: int, second: int, budget: int, mode: str = "longest_first") -> tuple[int, int]:
    """How many tokens of each text of a pair are kept within ``budget``: openvino_tokenizers'
    pair ``Truncate`` rule, which the pipeline's tokenizer applies (not quite Hugging Face's
    longest-first: an odd budget's spare token goes to the longer text)."""
    if first + second <= budget:
        return first, second
    if mode == "only_first":
        return min(first, budget), second
    if mode == "only_second":
        return first, min(second, budget)
    half, odd = budget // 2, budget % 2
    if first >= half + odd and second <= half:
        return budget - second, second
    if first < half + odd and second > half:
        return first, budget - first
    return half + odd * (first >= second), half + odd * (first < second)


class TextTokenizer:
    """The model's ``openvino_tokenizer.xml`` compiled as it was exported: one row per text.

    ``encode`` returns each text's tokens without the special tokens the tokenizer adds around a
    single text (their places come from the template), untruncated: the tokenizer's truncation is
    a state variable that is off until set.
    """

    def __init__(self, core: Any, model_dir: Path) -> None:
        model = core.read_model(model_dir / TOKENIZER_FILE)
        pad = _rt_text(model, "pad_token_id")
        self.pad_token_id = int(pad) if pad and pad.lstrip("-").isdigit() else 0
        self.truncation_side, self.truncation_mode = _truncation_of(model)
        compiled = core.compile_model(model, "CPU")
        self._mask = any("attention_mask" in output.get_names() for output in compiled.outputs)
        self._request = compiled.create_infer_request()
        # What the tokenizer adds around every text: an empty text is nothing else.
        added = len(self._rows([""])[0])
        template = PairTemplate.from_rt_info(_rt_text(model, "processed_post_processor_template"))
        if template is None or template.prefix + template.suffix != added:
            if added:
                raise ValueError(
                    f"{model_dir / TOKENIZER_FILE}: adds {added} special tokens to a text and has no "
                    "post-processor template that says where"
                )
            # Nothing added (or no template): nothing to strip, and no pair to build.
            template = PairTemplate((-1,), (0,), None, None)
        self.template = template

    def _rows(self, texts: Sequence[str]) -> list[np.ndarray]:
        self._request.infer([np.array(list(texts), dtype=np.str_)])
        ids = self._request.get_tensor("input_ids").data
        if not self._mask:
            return [np.array(row, dtype=np.int64) for row in ids]
        # The mask marks each row's own tokens, whichever side the tokenizer pads.
        mask = self._request.get_tensor("attention_mask").data.astype(bool)
        return [np.array(row[keep], dtype=np.int64) for row, keep in zip(ids, mask, strict=True)]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's own tokens (no special tokens added, none cut)."""
        rows = self._rows(texts)
        if len(rows) != len(texts):
            # A batch whose every text normalizes to nothing comes back as a single row.
            rows = [self._rows([text])[0] for text in texts]
        prefix, suffix = self.template.prefix, self.template.suffix
        return [row[prefix : len(row) - suffix] for row in rows]


def _rt_text(model: Any, key: str) -> str | None:
    if not model.has_rt_info(key):
        return None
    return str(model.get_rt_info(key).astype(str))


def _truncation_of(model: Any) -> tuple[str, str]:
    """The side and mode of the tokenizer's ``Truncate`` (right, longest first when it has none)."""
    side, mode = "right", "longest_first"
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Truncate":
            continue
        values = []
        for index in (op.get_input_size() - 2, op.get_input_size() - 1):
            node = op.input_value(index).get_node()
            if node.get_type_name() == "Constant":
                values.append(bytes(np.asarray(node.get_data(), dtype=np.uint8)).decode("utf-8", "replace"))
        if len(values) == 2:
            side = values[0] if values[0] in ("left", "right") else side
            mode = values[1] if values[1] in ("longest_first", "only_first", "only_second") else mode
    return side, mode


class CrossEncoder:
    """An encoder reranker (``BertForSequenceClassification`` and the like), tokenized and run here."""

    def __init__(self, spec: EngineSpec, core: Any, model: Any) -> None:
        assert spec.max_input_tokens is not None, "a reranker's engine spec carries its token limit"
        self.max_length = spec.max_input_tokens
        self.tokenizer = TextTokenizer(core, spec.model_path)
        inputs = {name for port in model.inputs for name in port.get_names()}
        self._token_types = "token_type_ids" in inputs
        self._positions = "position_ids" in inputs
        compiled = core.compile_model(model, spec.device, retrieval_properties(spec))
        self._request = compiled.create_infer_request()
        self._output = compiled.output(0)

    def score(self, query: str, documents: list[str]) -> list[float]:
        if not documents:
            return []
        ids, types = self._pairs(query, documents)
        width = max(len(row) for row in ids)
        input_ids = np.full((len(ids), width), self.tokenizer.pad_token_id, dtype=np.int64)
        attention = np.zeros((len(ids), width), dtype=np.int64)
        token_types = np.zeros((len(ids), width), dtype=np.int64)
        for row, (tokens, kinds) in enumerate(zip(ids, types, strict=True)):
            input_ids[row, : len(tokens)] = tokens
            attention[row, : len(tokens)] = 1
            token_types[row, : len(tokens)] = kinds
        feed = {"input_ids": input_ids, "attention_mask": attention}
        if self._token_types:
            feed["token_type_ids"] = token_types
        if self._positions:
            feed["position_ids"] = np.maximum(np.cumsum(attention, axis=1) - 1, 0)
        logits = np.asarray(self._request.infer(feed)[self._output], dtype=np.float64).reshape(len(ids), -1)
        return [float(score) for score in _relevance(logits)]

    def _pairs(self, query: str, documents: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each (query, document) pair's ids and token types, as the pipeline's tokenizer builds them."""
        template = self.tokenizer.template
        if template.pair is None or template.pair_types is None:
            # A tokenizer without a pair template: the pipeline reads query + document as one text.
            return self._singles([query + document for document in documents])
        query_ids, *document_ids = self.tokenizer.encode([query, *documents])
        budget = max(0, self.max_length - template.pair_specials)
        ids, types = [], []
        for document in document_ids:
            keep_query, keep_document = truncate_pair(
                len(query_ids), len(document), budget, self.tokenizer.truncation_mode
            )
            first = _cut(query_ids, keep_query, self.tokenizer.truncation_side)
            second = _cut(document, keep_document, self.tokenizer.truncation_side)
            row_ids: list[np.ndarray] = []
            row_types: list[np.ndarray] = []
            for token, kind in zip(template.pair, template.pair_types, strict=True):
                part = first if token == -1 else second if token == -2 else np.array([token], dtype=np.int64)
                row_ids.append(part)
                row_types.append(np.full(len(part), kind, dtype=np.int64))
            ids.append(np.concatenate(row_ids))
            types.append(np.concatenate(row_types))
        return ids, types

    def _singles(self, texts: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        template = self.tokenizer.template
        budget = max(0, self.max_length - len(template.single) + 1)
        ids, types = [], []
        for tokens in self.tokenizer.encode(texts):
            kept = _cut(tokens, min(len(tokens), budget), self.tokenizer.truncation_side)
            parts = [kept if token == -1 else np.array([token], dtype=np.int64) for token in template.single]
            ids.append(np.concatenate(parts))
            types.append(
                np.concatenate(
                    [np.full(len(p), k, np.int64) for p, k in zip(parts, template.single_types, strict=True)]
                )
            )
        return ids, types


def _cut(tokens: np.ndarray, keep: int, side: str) -> np.ndarray:
    return tokens[len(tokens) - keep :] if side == "left" else tokens[:keep]


def _relevance(logits: np.ndarray) -> np.ndarray:
    """The pipeline's score head: a sigmoid of one logit, else the softmax's class 1."""
    if logits.shape[1] == 1:
        sigmoid: np.ndarray = 1.0 / (1.0 + np.exp(-logits[:, 0]))
        return sigmoid
    exponents = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax: np.ndarray = exponents[:, 1] / exponents.sum(axis=1)
    return softmax


class PipelineReranker:
    """``TextRerankPipeline`` for decoder rerankers (see the module docstring), in document order."""

    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        config = ov_genai.TextRerankPipeline.Config()
        # The pipeline returns only its top_n scores: ask for all of each call's documents.
        config.top_n = spec.retrieval.embeddings_batch_size
        config.max_length = spec.max_input_tokens
        self.pipeline = ov_genai.TextRerankPipeline(
            str(spec.model_path), spec.device, config, **retrieval_properties(spec)
        )

    def score(self, query: str, documents: list[str]) -> list[float]:
        scores = [0.0] * len(documents)
        # (index, score) pairs sorted by score: back to document order.
        for index, score in self.pipeline.rerank(query, documents):
            scores[index] = float(score)
        return scores


def _model_type(model_dir: Path) -> str | None:
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if isinstance(model_type, str) else None


def build_retrieval_model(spec: EngineSpec) -> Embedder | Reranker:
    """The embedder or reranker of an embeddings / rerank engine spec."""
    if spec.kind is PipelineKind.EMBEDDINGS:
        return Embedder(spec)
    if spec.kind is not PipelineKind.RERANK:
        raise ValueError(f"{spec.kind.value} is not a retrieval task")
    if _model_type(spec.model_path) == "qwen3":
        return PipelineReranker(spec)
    import openvino as ov
    import openvino_tokenizers  # noqa: F401  (a Core created after this import reads tokenizer IRs)

    core = ov.Core()
    model = core.read_model(spec.model_path / MODEL_FILE)
    if any("beam_idx" in port.get_names() for port in model.inputs):
        return PipelineReranker(spec)  # a stateful decoder
    return CrossEncoder(spec, core, model)
