"""Embeddings, rerank and tokenize/detokenize over real HTTP, real engines and real pipelines.

One server serves an LLM, an embedding model and a reranker from an OVMS-layout repository (as
the shipped graphs/config.json does); a second serves the embedding model from flags with
``--task embeddings``, ``--truncate`` and ``--matryoshka_embeddings``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from scripts.fuzz_api import KNOWN_CRASHERS
from tests.conftest import ROOT, Server, start_config_server, start_server
from tests.served_openapi import ServedSchemas

EMBED, RERANK, LLM = "tiny-embed", "tiny-rerank", "tiny-llm"
TEXTS = ["hello world", "def f(x): return x + 1", "import os, sys", "The sea is calm tonight."]
LIMIT = 512  # tiny-embed's max_position_embeddings


def _graph(source: Path, models_path: Path) -> str:
    """A shipped graph, pointed at the test models' directory."""
    text = source.read_text(encoding="utf-8")
    return text.replace(f'"../../models/{models_path.name}"', json.dumps(str(models_path)))


@pytest.fixture(scope="module")
def repository_server(
    tiny_llm: Path, retrieval_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("retrieval")
    entries = []
    for name, model_dir in ((LLM, tiny_llm), (EMBED, retrieval_models[EMBED]), (RERANK, retrieval_models[RERANK])):
        (tmp / name).mkdir()
        (tmp / name / "graph.pbtxt").write_text(_graph(ROOT / "graphs" / name / "graph.pbtxt", model_dir))
        entries.append({"config": {"name": name, "base_path": name}})
    (tmp / "config.json").write_text(json.dumps({"model_config_list": entries}))
    server = start_config_server(tmp, tmp / "config.json", model_name=EMBED)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def flags_server(retrieval_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(
        tmp_path_factory.mktemp("embed-flags"),
        retrieval_models[EMBED],
        "--task", "embeddings", "--pooling", "MEAN", "--truncate", "--matryoshka_embeddings",
        "--embeddings_batch_size", "3",
        model_name=EMBED,
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="module")
def direct_embeddings(retrieval_models: dict[str, Path]) -> object:
    """The embedding pipeline driven directly, configured as the tiny-embed graph configures it."""
    import openvino_genai as ov_genai

    pipeline = ov_genai.TextEmbeddingPipeline
    config = pipeline.Config()
    config.pooling_type = pipeline.PoolingType.MEAN
    config.normalize = True
    config.max_length = LIMIT
    return pipeline(str(retrieval_models[EMBED]), "CPU", config)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _assert_same_embeddings(served: Sequence[Any], direct: Sequence[Any]) -> None:
    assert len(served) == len(direct)
    for got, want in zip(served, direct, strict=True):
        assert _cosine(np.asarray(got), np.asarray(want)) >= 0.9999
        assert abs(np.linalg.norm(got) - 1.0) < 1e-4  # normalize_embeddings: true


# -- embeddings -----------------------------------------------------------------------------------


def _vector(embedding: list[float] | str) -> np.ndarray:
    if isinstance(embedding, str):  # encoding_format "base64" asked explicitly: the SDK leaves it encoded
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.asarray(embedding)


# None: the SDK's default, which asks for base64 on the wire and decodes it itself.
@pytest.mark.parametrize("encoding_format", [None, "float", "base64"])
def test_openai_sdk_embeddings_equal_the_pipeline_and_are_unit_norm(
    repository_server: Server, direct_embeddings: object, encoding_format: str | None
) -> None:
    extra = {"encoding_format": encoding_format} if encoding_format else {}
    response = repository_server.client().embeddings.create(model=EMBED, input=TEXTS, **extra)  # type: ignore[arg-type]
    assert [item.index for item in response.data] == list(range(len(TEXTS)))
    served = [_vector(item.embedding) for item in response.data]
    _assert_same_embeddings(served, direct_embeddings.embed_documents(TEXTS))  # type: ignore[attr-defined]
    assert response.usage.prompt_tokens == response.usage.total_tokens > len(TEXTS)


def test_base64_embeddings_are_little_endian_float32(repository_server: Server) -> None:
    raw = httpx.post(
        f"{repository_server.url}/v3/embeddings",
        json={"model": EMBED, "input": "hello world", "encoding_format": "base64"},
        timeout=30,
    ).json()
    floats = httpx.post(
        f"{repository_server.url}/v1/embeddings", json={"model": EMBED, "input": "hello world"}, timeout=30
    ).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=0)


def test_token_id_inputs_embed_as_their_text(repository_server: Server, direct_embeddings: object) -> None:
    ids = httpx.post(
        f"{repository_server.url}/v3/tokenize",
        json={"model": EMBED, "content": "hello world", "add_special": False},
        timeout=30,
    ).json()["tokens"]
    client = repository_server.client()
    single = client.embeddings.create(model=EMBED, input=ids)
    several = client.embeddings.create(model=EMBED, input=[ids, ids])
    want = direct_embeddings.embed_documents(["hello world"])  # type: ignore[attr-defined]
    _assert_same_embeddings([single.data[0].embedding], want)
    _assert_same_embeddings([item.embedding for item in several.data], want * 2)


def test_langchain_openai_embeddings_work_unchanged(repository_server: Server, direct_embeddings: object) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: LangChain would otherwise tokenize with tiktoken (OpenAI's
    # vocabulary, downloaded) and send OpenAI token ids; any non-OpenAI server needs this.
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=EMBED,
        base_url=f"{repository_server.url}/v3",
        api_key="unused",
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    documents = embeddings.embed_documents(TEXTS)
    query = embeddings.embed_query(TEXTS[0])
    direct = direct_embeddings.embed_documents(TEXTS)  # type: ignore[attr-defined]
    _assert_same_embeddings(documents, direct)
    _assert_same_embeddings([query], direct[:1])


def test_requests_longer_than_the_batch_size_are_split_and_keep_their_order(
    flags_server: Server, direct_embeddings: object
) -> None:
    texts = [f"item {n}: " + "word " * n for n in range(8)]  # --embeddings_batch_size 3: three calls
    response = flags_server.client().embeddings.create(model=EMBED, input=texts)
    _assert_same_embeddings([item.embedding for item in response.data], direct_embeddings.embed_documents(texts))  # type: ignore[attr-defined]


def test_truncate_cuts_long_inputs_to_the_model_limit(flags_server: Server, direct_embeddings: object) -> None:
    long_text = "alpha beta gamma delta " * 400  # far over 512 tokens
    response = flags_server.client().embeddings.create(model=EMBED, input=[long_text, "short"])
    assert response.usage.prompt_tokens < 2 * LIMIT
    _assert_same_embeddings([response.data[0].embedding], direct_embeddings.embed_documents([long_text]))  # type: ignore[attr-defined]


def test_dimensions_shortens_and_renormalises_a_matryoshka_model(flags_server: Server) -> None:
    client = flags_server.client()
    full = np.asarray(client.embeddings.create(model=EMBED, input="hello world").data[0].embedding)
    short = np.asarray(client.embeddings.create(model=EMBED, input="hello world", dimensions=16).data[0].embedding)
    assert short.shape == (16,)
    assert abs(np.linalg.norm(short) - 1.0) < 1e-4
    assert _cosine(short, full[:16]) >= 0.9999
    with pytest.raises(openai.BadRequestError) as too_many:
        client.embeddings.create(model=EMBED, input="hello world", dimensions=full.shape[0] + 1)
    assert too_many.value.body["param"] == "dimensions"  # type: ignore[index]


def _post(server: Server, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=json.dumps(body), timeout=60)


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        ({"model": EMBED, "input": ""}, 400, "input", "empty string"),
        ({"model": EMBED, "input": []}, 400, "input", "non-empty"),
        ({"model": EMBED, "input": ["a", ""]}, 400, "input", "item 1"),
        ({"model": EMBED, "input": ["a", 1]}, 400, "input", "not a mix"),
        ({"model": EMBED, "input": [[1, 2], "a"]}, 400, "input", "not a mix"),
        ({"model": EMBED, "input": 5}, 400, "input", "non-empty string"),
        ({"model": EMBED, "input": "a", "encoding_format": "int8"}, 400, "encoding_format", "float"),
        ({"model": EMBED, "input": "a", "dimensions": 8}, 400, "dimensions", "matryoshka"),
        ({"model": EMBED, "input": ["x"] * 10_001}, 400, "input", "max_allowed_chunks 10000"),
        ({"model": EMBED, "input": "word " * 700}, 400, "input", f"more than model '{EMBED}' accepts ({LIMIT})"),
        ({"model": LLM, "input": "a"}, 400, "model", "serves text generation, not embeddings"),
        ({"model": "nope", "input": "a"}, 404, "model", "not served"),
        ({"input": "a"}, 400, "model", "required"),
        # Found by the fuzzer (a 500): ids that decode to nothing, an all-empty batch untokenizable.
        ({"model": EMBED, "input": [[0], [0]]}, 400, "input", "decode to an empty text"),
    ],
    ids=lambda value: None,
)
def test_bad_embeddings_requests_are_4xx_in_openai_error_shape(
    repository_server: Server, body: dict, status: int, param: str, words: str
) -> None:
    response = _post(repository_server, "/v3/embeddings", body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert words in error["message"], error["message"]


def test_a_too_long_input_names_both_numbers(repository_server: Server) -> None:
    error = _post(repository_server, "/v3/embeddings", {"model": EMBED, "input": ["ok", "word " * 700]}).json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert re.match(rf"input 1 has \d+ tokens, more than model '{EMBED}' accepts \({LIMIT}\)", error["message"])


# -- rerank ---------------------------------------------------------------------------------------


def _f32_pipeline_scores(model_dir: Path, query: str, documents: list[str]) -> list[float]:
    """openvino_genai's TextRerankPipeline at the precision the server runs rerankers in, in document order."""
    import openvino_genai as ov_genai

    config = ov_genai.TextRerankPipeline.Config()
    config.top_n = len(documents)
    pipeline = ov_genai.TextRerankPipeline(str(model_dir), "CPU", config, INFERENCE_PRECISION_HINT="f32")
    scores = [0.0] * len(documents)
    for index, score in pipeline.rerank(query, documents):
        scores[index] = score
    return scores


def _ranked(scores: Sequence[float]) -> list[int]:
    """Document indexes by score, highest first, equal scores by index (docs/retrieval.md)."""
    return sorted(range(len(scores)), key=lambda index: (-scores[index], index))


def test_cohere_style_rerank_sorts_by_the_pipelines_scores(
    repository_server: Server, retrieval_models: dict[str, Path]
) -> None:
    query = "what is python"
    documents = ["python is a language", "snakes live in the grass", "the sea", "import os", "def main(): pass"]
    body = {"model": RERANK, "query": query, "documents": documents, "top_n": 3, "return_documents": True}
    # Cohere's shape: documents as objects with "text" are the same as strings.
    mixed = {**body, "documents": [{"text": text} if n % 2 else text for n, text in enumerate(documents)]}
    answers = [_post(repository_server, path, payload) for path, payload in (("/v3/rerank", body), ("/rerank", mixed))]
    for answer in answers:
        assert answer.status_code == 200, answer.text
    results = answers[0].json()["results"]
    assert answers[1].json()["results"] == results
    direct = _f32_pipeline_scores(retrieval_models[RERANK], query, documents)
    assert [result["index"] for result in results] == _ranked(direct)[:3]
    for result in results:
        assert result["relevance_score"] == pytest.approx(direct[result["index"]], abs=1e-5)
        assert result["document"] == {"text": documents[result["index"]]}
    scores = [result["relevance_score"] for result in results]
    assert scores == sorted(scores, reverse=True)


def test_rerank_scores_are_distinct_where_f32_distinguishes_them_and_ties_go_by_index(
    repository_server: Server, retrieval_models: dict[str, Path]
) -> None:
    """On a CPU with native bf16 the reranker's scores collapsed into ties (0.83984375 for four of
    these five documents) and their order was arbitrary: rerankers run in f32 unless the graph's
    plugin_config says otherwise. Equal scores (a repeated document, two documents the tokenizer
    reads as the same unknown token) come back in document order."""
    query = "what is python"
    documents = [
        "python is a language", "snakes live in the grass", "the sea", "import os", "def main(): pass",
        "the sea", "\u00a6", "\u00af",
    ]  # fmt: skip
    answer = _post(repository_server, "/v3/rerank", {"model": RERANK, "query": query, "documents": documents})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    served = {result["index"]: result["relevance_score"] for result in results}
    scores = [served[index] for index in range(len(documents))]
    assert [result["index"] for result in results] == _ranked(scores)
    direct = _f32_pipeline_scores(retrieval_models[RERANK], query, documents)
    for i in range(len(documents)):
        for j in range(i + 1, len(documents)):
            if abs(direct[i] - direct[j]) > 1e-6:
                assert scores[i] != scores[j], (i, j, scores)
    assert len(set(scores[:5])) == 5
    # Ties: the repeated "the sea", and two characters that are both [UNK] to the tokenizer.
    assert scores[2] == scores[5] and scores[6] == scores[7]
    order = [result["index"] for result in results]
    assert order.index(2) < order.index(5) and order.index(6) < order.index(7)


@pytest.mark.parametrize("documents", [["", ""], ["a", {"text": ""}]])
def test_empty_rerank_documents_are_a_400_naming_the_item(repository_server: Server, documents: list[object]) -> None:
    """Found by the fuzzer: all-empty documents were a 500 (their batch tokenizes to no rows)."""
    response = _post(repository_server, "/v3/rerank", {"model": RERANK, "query": "q", "documents": documents})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "documents"
    assert f"item {documents.index('') if '' in documents else 1} is an empty document" in error["message"]


def _engine_restarts(server: Server, model: str) -> float:
    samples = _metric_samples(server)
    return samples.get(("ovserve_engine_restarts_total", (("model", model),)), 0.0)


def _metric_samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _served(server: Server, model: str, endpoint: str) -> float:
    """The model's 200s on the endpoint so far (ovserve_requests_total)."""
    return sum(
        value
        for (name, labels), value in _metric_samples(server).items()
        if name == "ovserve_requests_total"
        and {("model", model), ("endpoint", endpoint), ("status", "200")} <= set(labels)
    )


@pytest.mark.parametrize(("path", "body"), KNOWN_CRASHERS, ids=lambda value: None)
def test_bodies_that_once_killed_an_engine_are_answered_and_the_engine_lives(
    repository_server: Server, path: str, body: dict[str, Any]
) -> None:
    """Found by the fuzzer's valid bodies (scripts/fuzz_api.py): the rerank pipeline's paired
    tokenizer wrote the query's tokens once per document into a buffer sized for one copy, whenever
    (documents - 2) x query tokens exceeded the documents' tokens; the engine process died
    (``free(): invalid pointer``), failing every rerank in flight. Documents the tokenizer reads
    nothing of (control characters) were refused as a workaround; they are scored now."""
    engines = set(repository_server.engine_pids())
    restarts = {model: _engine_restarts(repository_server, model) for model in (EMBED, RERANK)}
    items = body.get("documents", body.get("input"))
    assert isinstance(items, list)
    for _ in range(3):
        answer = _post(repository_server, path, body)
        assert answer.status_code == 200, answer.text
        if path.endswith("rerank"):
            results = answer.json()["results"]
            assert sorted(result["index"] for result in results) == list(range(len(items)))
            assert all(0.0 < result["relevance_score"] < 1.0 for result in results)
        else:
            assert [item["index"] for item in answer.json()["data"]] == list(range(len(items)))
    assert set(repository_server.engine_pids()) == engines
    assert {model: _engine_restarts(repository_server, model) for model in (EMBED, RERANK)} == restarts


def test_embeddings_of_control_characters_only_get_one_vector_each(repository_server: Server) -> None:
    """The embedding pipeline answers a batch whose every text normalizes to nothing with one vector."""
    response = _post(repository_server, "/v3/embeddings", {"model": EMBED, "input": ["\x17", "\x0f", "\u200b"]})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == [0, 1, 2]
    assert data[0]["embedding"] == data[1]["embedding"] == data[2]["embedding"]


def test_rerank_without_top_n_returns_every_document_without_text(repository_server: Server) -> None:
    answer = _post(repository_server, "/v1/rerank", {"model": RERANK, "query": "q", "documents": ["a", "b", "c"]})
    results = answer.json()["results"]
    assert sorted(result["index"] for result in results) == [0, 1, 2]
    assert all("document" not in result for result in results)
    assert answer.json()["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": RERANK, "query": "q", "documents": []}, "documents"),
        ({"model": RERANK, "query": "", "documents": ["a"]}, "query"),
        ({"model": RERANK, "documents": ["a"]}, "query"),
        ({"model": RERANK, "query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
        ({"model": RERANK, "query": "q", "documents": [{"txt": "a"}]}, "documents.0"),
        ({"model": RERANK, "query": "q", "documents": ["a"] * 10_001}, "documents"),
        ({"model": RERANK, "query": "word " * 700, "documents": ["a"]}, "query"),
        ({"model": EMBED, "query": "q", "documents": ["a"]}, "model"),
    ],
)
def test_bad_rerank_requests_are_400_in_openai_error_shape(repository_server: Server, body: dict, param: str) -> None:
    response = _post(repository_server, "/v3/rerank", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


# -- tokenize / detokenize ------------------------------------------------------------------------


def test_tokenize_and_detokenize_round_trip_with_pieces(repository_server: Server) -> None:
    text = "hello world, déjà vu"
    tokens = _post(repository_server, "/v3/tokenize", {"model": LLM, "content": text}).json()["tokens"]
    assert all(isinstance(token, int) for token in tokens)
    pieces = _post(repository_server, "/tokenize", {"model": LLM, "content": text, "with_pieces": True}).json()
    assert [piece["id"] for piece in pieces["tokens"]] == tokens
    # A byte-level token may hold part of a UTF-8 character: its own piece cannot spell it.
    ascii_pieces = _post(repository_server, "/tokenize", {"model": LLM, "content": "hello world", "with_pieces": True})
    assert "".join(piece["piece"] for piece in ascii_pieces.json()["tokens"]) == "hello world"
    back = _post(repository_server, "/v1/detokenize", {"model": LLM, "tokens": tokens}).json()
    assert back == {"content": text}


def test_tokenize_adds_special_tokens_only_when_asked_as_llama_cpp(repository_server: Server) -> None:
    with_special = _post(
        repository_server, "/v3/tokenize", {"model": EMBED, "content": "hello", "add_special": True}
    ).json()["tokens"]
    without = _post(repository_server, "/v3/tokenize", {"model": EMBED, "content": "hello"}).json()["tokens"]
    assert with_special[1:-1] == without and len(with_special) == len(without) + 2  # [CLS] ... [SEP]


def test_tokenize_messages_counts_the_prompt_exactly_as_chat_does(repository_server: Server) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}]
    tokens = _post(repository_server, "/v3/tokenize", {"model": LLM, "messages": messages}).json()["tokens"]
    completion = repository_server.client().chat.completions.create(model=LLM, messages=messages, max_tokens=1)  # type: ignore[arg-type]
    assert completion.usage is not None and completion.usage.prompt_tokens == len(tokens)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v3/tokenize", {"model": LLM}, None),
        ("/v3/tokenize", {"model": LLM, "content": "a", "messages": [{"role": "user", "content": "a"}]}, None),
        ("/v3/tokenize", {"content": "a"}, "model"),  # several models served: name one
        ("/v3/tokenize", {"model": EMBED, "messages": [{"role": "user", "content": "a"}]}, "model"),
        ("/v3/detokenize", {"model": LLM, "tokens": [-1]}, "tokens.0"),
        ("/v3/detokenize", {"model": LLM, "tokens": "abc"}, "tokens"),
    ],
)
def test_bad_tokenize_requests_are_400(repository_server: Server, path: str, body: dict, param: str | None) -> None:
    response = _post(repository_server, path, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


# -- operations -----------------------------------------------------------------------------------


ANSWERED = [
    ("/v3/embeddings", {"model": EMBED, "input": TEXTS}),
    ("/v3/embeddings", {"model": EMBED, "input": "hello world", "encoding_format": "base64"}),
    ("/v3/rerank", {"model": RERANK, "query": "code", "documents": TEXTS, "top_n": 2, "return_documents": True}),
    ("/v3/rerank", {"model": RERANK, "query": "code", "documents": [{"text": text} for text in TEXTS]}),
    ("/v3/tokenize", {"model": LLM, "content": "hello world"}),
    ("/v3/tokenize", {"model": EMBED, "content": "hello world", "with_pieces": True}),
    ("/v3/tokenize", {"model": LLM, "messages": [{"role": "user", "content": "hi"}], "with_pieces": True}),
    ("/v3/tokenize", {"model": LLM, "content": ""}),
    ("/v3/detokenize", {"model": LLM, "tokens": [1, 2, 3]}),
    ("/v3/detokenize", {"model": LLM, "tokens": []}),
]


def test_every_retrieval_answer_matches_the_served_openapi_document(repository_server: Server) -> None:
    schemas = ServedSchemas(httpx.get(f"{repository_server.url}/openapi.json", timeout=10).json())
    tokenized = {"model": EMBED, "content": "hello world", "add_special": False}
    ids = httpx.post(f"{repository_server.url}/v3/tokenize", json=tokenized, timeout=30).json()["tokens"]
    for path, body in [*ANSWERED, ("/v3/embeddings", {"model": EMBED, "input": [ids, ids[:1]]})]:
        response = httpx.post(f"{repository_server.url}{path}", json=body, timeout=60)
        assert response.status_code == 200, (path, body, response.text)
        schemas.validate_answer(path, response.json())


def test_each_model_has_readiness_and_its_requests_are_counted_in_metrics(repository_server: Server) -> None:
    for name in (LLM, EMBED, RERANK):
        assert httpx.get(f"{repository_server.url}/v2/models/{name}/ready", timeout=5).status_code == 200
    repository_server.client().embeddings.create(model=EMBED, input="count me")
    text = httpx.get(f"{repository_server.url}/metrics", timeout=10).text
    counted = [line for line in text.splitlines() if line.startswith("ovserve_requests_total{")]
    assert any(f'model="{EMBED}"' in line and 'endpoint="embeddings"' in line for line in counted), counted
    assert any(f'model="{RERANK}"' in line and 'endpoint="rerank"' in line for line in counted), counted


# -- many requests --------------------------------------------------------------------------------

REPEATS, CONCURRENT = 30, 16


def _repeated_and_concurrent(server: Server, path: str, body: dict[str, Any]) -> list[httpx.Response]:
    """REPEATS requests one after another, then CONCURRENT at once."""
    from concurrent.futures import ThreadPoolExecutor

    with httpx.Client(timeout=120) as client:
        responses = [client.post(f"{server.url}{path}", json=body) for _ in range(REPEATS)]
        with ThreadPoolExecutor(CONCURRENT) as pool:
            responses += list(pool.map(lambda _: client.post(f"{server.url}{path}", json=body), range(CONCURRENT)))
    return responses


def test_repeated_and_concurrent_embeddings_all_succeed_with_identical_vectors(repository_server: Server) -> None:
    restarts, served = _engine_restarts(repository_server, EMBED), _served(repository_server, EMBED, "embeddings")
    texts = [*TEXTS, "word " * 200]
    responses = _repeated_and_concurrent(repository_server, "/v3/embeddings", {"model": EMBED, "input": texts})
    assert [response.status_code for response in responses] == [200] * (REPEATS + CONCURRENT)
    vectors = [[item["embedding"] for item in response.json()["data"]] for response in responses]
    assert len(vectors[0]) == len(texts)
    assert all(other == vectors[0] for other in vectors[1:])
    assert _served(repository_server, EMBED, "embeddings") == served + REPEATS + CONCURRENT
    assert _engine_restarts(repository_server, EMBED) == restarts


def test_repeated_and_concurrent_reranks_all_succeed_with_identical_results(repository_server: Server) -> None:
    restarts, served = _engine_restarts(repository_server, RERANK), _served(repository_server, RERANK, "rerank")
    # More documents than a batch (32): two engine calls per request.
    documents = [f"document {n}: " + " ".join(TEXTS[: 1 + n % len(TEXTS)]) for n in range(40)]
    body = {"model": RERANK, "query": "what is python", "documents": documents}
    responses = _repeated_and_concurrent(repository_server, "/v3/rerank", body)
    assert [response.status_code for response in responses] == [200] * (REPEATS + CONCURRENT)
    results = [response.json()["results"] for response in responses]
    assert sorted(result["index"] for result in results[0]) == list(range(len(documents)))
    assert all(other == results[0] for other in results[1:])
    assert _served(repository_server, RERANK, "rerank") == served + REPEATS + CONCURRENT
    assert _engine_restarts(repository_server, RERANK) == restarts
