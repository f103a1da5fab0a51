"""Serving from OVMS deployment files: several models, speculative, prompt lookup, stateful."""

from __future__ import annotations

import concurrent.futures
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import ROOT, Server, start_config_server
from tests.ovms import OVMS_EXPORTED_GRAPH

GRAPHS = ROOT / "graphs"
SERVED = ["tiny-llm", "tiny-llm-speculative", "tiny-llm-prompt-lookup", "tiny-llm-stateful"]
VLM = "tiny-vlm"
RETRIEVAL = ["tiny-embed", "tiny-rerank"]
PROMPTS = [
    [{"role": "user", "content": "hello there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}],
    [{"role": "user", "content": "repeat after me: one two three, one two three, one two three"}],
]


@pytest.fixture(scope="module")
def graphs_server(
    demo_models: dict[str, Path], retrieval_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The shipped graphs/config.json: four deployments of the demo model, the VLM, an embedding
    model and a reranker in one server."""
    server = start_config_server(tmp_path_factory.mktemp("graphs"), GRAPHS / "config.json")
    yield server
    server.stop()


def test_models_lists_every_graph_and_each_has_readiness(graphs_server: Server) -> None:
    listed = [model.id for model in graphs_server.client().models.list()]
    assert sorted(listed) == sorted([*SERVED, VLM, *RETRIEVAL])
    for name in [*SERVED, VLM, *RETRIEVAL]:
        assert httpx.get(f"{graphs_server.url}/v2/models/{name}/ready", timeout=5).status_code == 200
    missing = httpx.get(f"{graphs_server.url}/v2/models/nope/ready", timeout=5)
    assert missing.status_code == 404


def test_the_demo_config_answers_chat_embeddings_and_rerank_at_once(graphs_server: Server) -> None:
    client = graphs_server.client()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        chat = pool.submit(
            client.chat.completions.create, model="tiny-llm", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
        embedding = pool.submit(client.embeddings.create, model="tiny-embed", input=["hello", "world"])
        rerank = pool.submit(
            httpx.post,
            f"{graphs_server.url}/v3/rerank",
            json={"model": "tiny-rerank", "query": "hello", "documents": ["hello", "world"]},
            timeout=60,
        )
        assert chat.result().choices[0].message.content is not None
        assert len(embedding.result().data) == 2
        assert rerank.result().status_code == 200 and len(rerank.result().json()["results"]) == 2


@pytest.mark.parametrize("messages", PROMPTS, ids=["hello", "system", "repetitive"])
def test_greedy_output_is_identical_across_pipelines_unary_and_stream(graphs_server: Server, messages) -> None:
    client = graphs_server.client()
    texts = {}
    for name in SERVED:
        unary = client.chat.completions.create(
            model=name, messages=messages, max_tokens=30, temperature=0, extra_body={"ignore_eos": True}
        )
        assert unary.usage is not None and unary.usage.completion_tokens == 30
        stream = client.chat.completions.create(
            model=name, messages=messages, max_tokens=30, temperature=0, stream=True, extra_body={"ignore_eos": True}
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert streamed == unary.choices[0].message.content, name
        texts[name] = streamed
    assert len(set(texts.values())) == 1, texts


def test_vlm_graph_serves_images(graphs_server: Server) -> None:
    import base64
    import io

    from PIL import Image

    def data_url(color: str) -> str:
        buffer = io.BytesIO()
        Image.new("RGB", (56, 56), color).save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    def ask(color: str) -> openai.types.chat.ChatCompletion:
        content = [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": data_url(color)}},
        ]
        return graphs_server.client().chat.completions.create(
            model=VLM,
            messages=[{"role": "user", "content": content}],
            max_tokens=12,
            temperature=0,  # type: ignore[arg-type]
        )

    red, blue = ask("red"), ask("blue")
    assert red.choices[0].message.content != blue.choices[0].message.content  # the image is really used
    # The LLM graphs of the same server still refuse images.
    content = [{"type": "image_url", "image_url": {"url": data_url("red")}}]
    with pytest.raises(openai.BadRequestError):
        graphs_server.client().chat.completions.create(
            model="tiny-llm", messages=[{"role": "user", "content": content}]
        )  # type: ignore[arg-type]


def test_unknown_model_is_404_in_openai_shape(graphs_server: Server) -> None:
    with pytest.raises(openai.NotFoundError) as excinfo:
        graphs_server.client().chat.completions.create(model="tiny", messages=PROMPTS[0])
    assert excinfo.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert "tiny-llm-speculative" in excinfo.value.message


@pytest.mark.parametrize(
    ("model", "fields", "param"),
    [
        ("tiny-llm", {"num_assistant_tokens": 3}, "num_assistant_tokens"),
        ("tiny-llm", {"max_ngram_size": 2}, "max_ngram_size"),
        ("tiny-llm-stateful", {"assistant_confidence_threshold": 0.5}, "assistant_confidence_threshold"),
        ("tiny-llm-speculative", {"max_ngram_size": 2}, "max_ngram_size"),
        ("tiny-llm-prompt-lookup", {"assistant_confidence_threshold": 0.5}, "assistant_confidence_threshold"),
        ("tiny-llm-speculative", {"num_assistant_tokens": 3, "assistant_confidence_threshold": 0.5}, None),
        ("tiny-llm-stateful", {"n": 2, "temperature": 1.0}, "n"),
        ("tiny-llm-stateful", {"best_of": 2}, "best_of"),
        ("tiny-llm", {"best_of": 21}, "best_of"),
    ],
)
def test_fields_the_pipeline_cannot_use_are_refused(graphs_server: Server, model, fields, param) -> None:
    body = {"model": model, "messages": PROMPTS[0], "max_tokens": 5, **fields}
    response = httpx.post(f"{graphs_server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    if param in {"num_assistant_tokens", "max_ngram_size", "assistant_confidence_threshold"}:
        # The message says which pipeline does accept the field.
        assert "pipeline" in error["message"] and (
            "speculative" in error["message"] or "prompt_lookup" in error["message"]
        )


def test_drafting_fields_reach_their_pipelines(graphs_server: Server) -> None:
    client = graphs_server.client()
    for model, extra in (
        ("tiny-llm-speculative", {"num_assistant_tokens": 2}),
        ("tiny-llm-speculative", {"assistant_confidence_threshold": 0.3}),
        ("tiny-llm-prompt-lookup", {"num_assistant_tokens": 2, "max_ngram_size": 2}),
    ):
        completion = client.chat.completions.create(
            model=model, messages=PROMPTS[2], max_tokens=8, temperature=0, extra_body=extra
        )
        assert completion.choices[0].finish_reason in {"stop", "length"}


def test_stateful_pipeline_streams_and_cancels_on_disconnect(graphs_server: Server) -> None:
    body = {"model": "tiny-llm-stateful", "messages": PROMPTS[0], "max_tokens": 1500, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", f"{graphs_server.url}/v3/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert any(line.startswith("data: ") for line in (next(lines) for _ in range(6)))
    server_for_stateful = Server(graphs_server.process, graphs_server.port, graphs_server.log_path, "tiny-llm-stateful")

    from tests.e2e.test_engine_lifecycle import wait_for

    def idle() -> bool:
        return server_for_stateful.metric("ovserve_engine_requests") == 0

    assert wait_for(idle, timeout=15)
    # The next request is served at once: the cancelled generation no longer holds the pipeline.
    completion = graphs_server.client().chat.completions.create(
        model="tiny-llm-stateful", messages=PROMPTS[0], max_tokens=5, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(completion)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 5


# -- speculative precedence: request > generation_config.json > built-in 5 ------------------------


def self_speculative_config(tmp_path: Path, tiny_llm: Path, generation_config: dict | None) -> Path:
    """tiny-llm drafting for itself: every draft token is accepted, so each verification step
    yields exactly num_assistant_tokens + 1 tokens and the step count reveals the value used."""
    graph_dir = tmp_path / "self-speculative"
    graph_dir.mkdir()
    options = [f'models_path: "{tiny_llm}"', f'draft_models_path: "{tiny_llm}"']
    if generation_config is not None:
        path = tmp_path / "generation_config.json"
        path.write_text(
            json.dumps({**json.loads((tiny_llm / "generation_config.json").read_text()), **generation_config})
        )
        options.append(f'generation_config_path: "{path}"')
    graph_dir.joinpath("graph.pbtxt").write_text(
        'node: { calculator: "HttpLLMCalculator"\n'
        + "node_options: { [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {\n"
        + "\n".join(options)
        + "\n} } }\n"
    )
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": "tiny-llm", "base_path": "self-speculative"}]}))
    return config


def verify_steps(server: Server, **fields: object) -> int:
    before = server.metric("ovserve_draft_verify_steps_total") or 0
    server.client().chat.completions.create(
        model="tiny-llm", messages=PROMPTS[0], max_tokens=24, temperature=0, extra_body={"ignore_eos": True, **fields}
    )
    after = server.metric("ovserve_draft_verify_steps_total")
    assert after is not None
    return int(after - before)


def expected_steps(num_assistant_tokens: int, tokens: int = 24) -> int:
    # The prefill step yields one token; each later step yields the accepted drafts + 1.
    return 1 + math.ceil((tokens - 1) / (num_assistant_tokens + 1))


def test_num_assistant_tokens_precedence(tiny_llm: Path, tmp_path: Path) -> None:
    builtin = start_config_server(tmp_path, self_speculative_config(tmp_path, tiny_llm, None))
    try:
        assert verify_steps(builtin) == expected_steps(5)  # built-in default
        assert verify_steps(builtin, num_assistant_tokens=2) == expected_steps(2)  # request
    finally:
        builtin.stop()
    model_dir = tmp_path / "with-default"
    model_dir.mkdir()
    configured = start_config_server(
        model_dir, self_speculative_config(model_dir, tiny_llm, {"num_assistant_tokens": 1})
    )
    try:
        assert verify_steps(configured) == expected_steps(1)  # generation_config.json
        assert verify_steps(configured, num_assistant_tokens=3) == expected_steps(3)  # request beats it
    finally:
        configured.stop()


# -- OVMS's export_model.py layout, unchanged ----------------------------------------------------


def test_ovms_export_layout_loads_unchanged(demo_models: dict[str, Path], tmp_path: Path) -> None:
    # What OVMS's export_model.py writes: models/<name>/ holding the IR, the draft in a
    # sub-directory, graph.pbtxt next to them, and config.json's mediapipe_config_list entry.
    repository = tmp_path / "models"
    served = repository / "Qwen" / "tiny-chat"
    shutil.copytree(demo_models["tiny-llm"], served)
    shutil.copytree(demo_models["tiny-draft"], served / "tiny-draft")
    (served / "graph.pbtxt").write_text(OVMS_EXPORTED_GRAPH)
    config = repository / "config.json"
    config.write_text(
        json.dumps(
            {
                "mediapipe_config_list": [{"name": "Qwen/tiny-chat", "base_path": "Qwen/tiny-chat"}],
                "model_config_list": [],
            },
            indent=4,
        )
    )
    server = start_config_server(tmp_path, config)
    try:
        completion = server.client().chat.completions.create(
            model="Qwen/tiny-chat", messages=PROMPTS[0], max_tokens=10, temperature=0
        )
        assert completion.model == "Qwen/tiny-chat"
        assert completion.choices[0].message.content
        assert "speculative pipeline" in server.log()
    finally:
        server.stop()
