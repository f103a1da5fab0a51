"""Ollama's native API on the demo models, through the real ``ollama`` Python client
(``ollama.Client(host=...)``) over real HTTP: chat streamed and unary, generate, embed, list, ps,
show, a forced tool call, think, real durations and counts, and ``keep_alive`` unloading and
reloading real engine processes (``/api/ps`` and ``load_duration`` showing it).

One server serves tiny-llm (its graph names the hermes tool parser and the qwen3 reasoning parser,
so the tools and thinking capabilities are on) and tiny-embed. tiny-llm is a random model: what
it writes is noise, so the tests check shapes, agreement between stream and unary answers under
greedy decoding, and what the grammar forces."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from tests import images
from tests.conftest import ROOT, Server, contention_factor, start_config_server

LLM, EMBED = "tiny-llm", "tiny-embed"
GREEDY = {"temperature": 0, "num_predict": 12}
ASK = [{"role": "user", "content": "Why is the sky blue?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            # The client keeps only type/items/description/enum of a property: enum bounds the call.
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}


def _graph(name: str, models_path: Path, extra: str = "") -> str:
    text = (ROOT / "graphs" / name / "graph.pbtxt").read_text(encoding="utf-8")
    text = text.replace(f'"../../models/{models_path.name}"', json.dumps(str(models_path)))
    return text.replace(
        f"models_path: {json.dumps(str(models_path))}", f"models_path: {json.dumps(str(models_path))}{extra}"
    )


@pytest.fixture(scope="module")
def ollama_server(
    tiny_llm: Path, retrieval_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("ollama")
    parsers = ',\n          tool_parser: "hermes3",\n          reasoning_parser: "qwen3"'
    graphs = {LLM: _graph(LLM, tiny_llm, parsers), EMBED: _graph(EMBED, retrieval_models[EMBED])}
    for name, text in graphs.items():
        (tmp / name).mkdir()
        (tmp / name / "graph.pbtxt").write_text(text)
    (tmp / "config.json").write_text(
        json.dumps({"model_config_list": [{"config": {"name": name, "base_path": name}} for name in graphs]})
    )
    server = start_config_server(tmp, tmp / "config.json", model_name=LLM)
    yield server
    server.stop()


@pytest.fixture()
def client(ollama_server: Server) -> ollama.Client:
    return ollama.Client(host=ollama_server.url, timeout=120)


def test_chat_stream_concatenates_to_the_unary_answer(client: ollama.Client) -> None:
    unary = client.chat(model=LLM, messages=ASK, options=GREEDY, think=False, stream=False)
    lines = list(client.chat(model=LLM, messages=ASK, options=GREEDY, think=False, stream=True))
    assert lines[-1].done and not any(line.done for line in lines[:-1])
    assert "".join(line.message.content or "" for line in lines) == unary.message.content
    assert "".join(line.message.thinking or "" for line in lines) == (unary.message.thinking or "")
    last = lines[-1]
    for answer in (unary, last):
        assert answer.done_reason in ("stop", "length")
        assert answer.prompt_eval_count and answer.prompt_eval_count > 5
        assert answer.eval_count and 0 < answer.eval_count <= GREEDY["num_predict"]
        assert answer.total_duration and answer.prompt_eval_duration and answer.eval_duration
        assert answer.load_duration and answer.load_duration > 0
        parts = answer.load_duration + answer.prompt_eval_duration + answer.eval_duration
        assert answer.total_duration >= parts
    assert (unary.prompt_eval_count, unary.eval_count) == (last.prompt_eval_count, last.eval_count)


def test_generate_unary_and_stream(client: ollama.Client) -> None:
    unary = client.generate(model=LLM, prompt="Once upon a time", options=GREEDY, stream=False)
    lines = list(client.generate(model=LLM, prompt="Once upon a time", options=GREEDY, stream=True))
    assert "".join(line.response for line in lines) == unary.response
    assert unary.done and unary.eval_count and unary.prompt_eval_count
    raw = client.generate(model=LLM, prompt="Once upon a time", raw=True, options=GREEDY, stream=False)
    assert raw.prompt_eval_count and raw.prompt_eval_count < unary.prompt_eval_count  # no template around it


def test_forced_tool_call_has_arguments_as_an_object(client: ollama.Client) -> None:
    options = {"tool_choice": "get_weather", "temperature": 0, "num_predict": 80}
    unary = client.chat(model=LLM, messages=ASK, tools=[WEATHER], options=options, stream=False)
    (call,) = unary.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert isinstance(call.function.arguments, dict) and call.function.arguments["city"] in ("Paris", "Rome")
    lines = list(client.chat(model=LLM, messages=ASK, tools=[WEATHER], options=options, stream=True))
    streamed = [c for line in lines for c in line.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == [
        (call.function.name, dict(call.function.arguments))
    ]
    # The result goes back as a tool message.
    follow = [*ASK, unary.message, {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    answer = client.chat(model=LLM, messages=follow, tools=[WEATHER], options=GREEDY, stream=False)
    assert answer.done


def test_think_is_accepted_and_format_json_constrains(client: ollama.Client) -> None:
    for think in (True, False, "low", "high"):
        answer = client.chat(model=LLM, messages=ASK, think=think, options=GREEDY, stream=False)
        assert answer.done_reason in ("stop", "length"), think
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},  # bounded: a random model writes long integers
        "required": ["ok"],
        "additionalProperties": False,
    }
    answer = client.chat(
        model=LLM, messages=ASK, format=schema, options={"temperature": 0, "num_predict": 40}, stream=False
    )
    assert answer.done_reason == "stop", answer
    assert isinstance(json.loads(answer.message.content or "")["ok"], bool), answer


def test_embed(client: ollama.Client) -> None:
    answer = client.embed(model=EMBED, input=["hello world", "the sea is calm"])
    assert len(answer.embeddings) == 2 and len(answer.embeddings[0]) > 8
    assert answer.prompt_eval_count and answer.prompt_eval_count >= 4
    single = client.embed(model=EMBED, input="hello world")
    assert single.embeddings[0] == pytest.approx(answer.embeddings[0], abs=1e-5)
    legacy = client.embeddings(model=EMBED, prompt="hello world")
    assert list(legacy.embedding) == pytest.approx(answer.embeddings[0], abs=1e-5)


def test_list_ps_show(client: ollama.Client, ollama_server: Server) -> None:
    assert sorted(model.model for model in client.list().models) == [EMBED, LLM]
    running = {model.model: model for model in client.ps().models}
    assert set(running) == {EMBED, LLM}
    assert running[LLM].size and running[LLM].context_length and running[LLM].expires_at
    shown = client.show(LLM)
    assert shown.capabilities == ["completion", "tools", "thinking"]
    assert shown.template and "im_start" in shown.template
    assert shown.details and shown.details.family == "qwen2" and shown.details.format == "openvino"
    assert "temperature" in (shown.parameters or "")
    assert client.show(EMBED).capabilities == ["embedding"]
    assert httpx.get(ollama_server.url).text == "Ollama is running"
    assert httpx.get(f"{ollama_server.url}/api/version").json()["version"]


def test_errors_are_4xx_in_ollamas_shape(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="llama9", messages=ASK)
    assert missing.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as wrong_task:
        client.embed(model=LLM, input="hi")
    assert wrong_task.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as pull:
        client.pull("llama3")
    assert pull.value.status_code == 400 and "ovserve export" in pull.value.error


def _running(client: ollama.Client) -> dict[str, Any]:
    """/api/ps: the loaded models by name."""
    return {model.model: model for model in client.ps().models}


def _state(server: Server, name: str) -> str:
    """The model's state as ``GET /v3/models/{name}`` tells it (``unloading`` included)."""
    response = httpx.get(f"{server.url}/v3/models/{name}")
    assert response.status_code == 200, response.text
    return str(response.json()["ovserve"]["state"])


def _until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> float:
    """Poll ``condition`` until it holds (the bound scaled to how busy the machine is); when it did."""
    deadline = time.time() + seconds * contention_factor()
    while not condition():
        assert time.time() < deadline, f"still not {what}"
        time.sleep(0.1)
    return time.time()


# A model engine's process takes longer than this to start and load (Python, OpenVINO, the model).
_LOAD_AT_LEAST_NS = 100_000_000
# Ollama's expires_at for a model that never unloads.
_NEVER_YEAR = 2318


def test_keep_alive_zero_unloads_after_the_answer_and_the_next_request_loads_it_again(
    client: ollama.Client, ollama_server: Server
) -> None:
    warm = client.chat(model=LLM, messages=ASK, options=GREEDY, stream=False)  # loaded at start
    answer = client.chat(model=LLM, messages=ASK, options=GREEDY, keep_alive=0, stream=False)
    assert answer.done_reason in ("stop", "length") and answer.eval_count
    running = _running(client)
    assert LLM not in running and EMBED in running  # only the model the request named
    _until(lambda: _state(ollama_server, LLM) == "unloaded", "unloaded")  # its engine process exited
    cold = client.chat(model=LLM, messages=ASK, options=GREEDY, stream=False)
    assert LLM in _running(client)
    assert warm.load_duration and cold.load_duration and cold.total_duration
    assert cold.load_duration >= _LOAD_AT_LEAST_NS and cold.load_duration > 10 * warm.load_duration
    assert cold.prompt_eval_duration and cold.eval_duration
    assert cold.total_duration >= cold.load_duration + cold.prompt_eval_duration + cold.eval_duration
    # Loaded again without keep_alive: the model's own policy (none here: it stays).
    assert _running(client)[LLM].expires_at.year == _NEVER_YEAR


def test_keep_alive_duration_shows_in_ps_then_unloads_the_model(client: ollama.Client) -> None:
    client.generate(model=LLM)  # loaded (it may have been unloaded by another test)
    before = time.time()
    client.generate(model=LLM, prompt="Once upon a time", options=GREEDY, keep_alive="5s")
    listed = _running(client)[LLM]
    after = time.time()
    expires = listed.expires_at.timestamp()
    assert before + 5 - 0.25 <= expires <= after + 5 + 0.25  # the request's end plus 5 s
    assert listed.size and listed.size > 50 << 20  # the engine's resident memory, not its 3 MB of files
    gone = _until(lambda: LLM not in _running(client), "unloaded", 5 + 30)
    assert gone >= expires - 0.25  # listed until its keep_alive ran out, then not
    assert EMBED in _running(client)
    assert client.generate(model=LLM).done_reason == "load"  # loaded again for the tests after this one
    assert _running(client)[LLM].expires_at.year == _NEVER_YEAR  # the keep_alive ended with the unload


def test_ollamas_load_and_unload_requests(client: ollama.Client) -> None:
    """What ``ollama run`` (no prompt: load) and ``ollama stop`` (no prompt, keep_alive 0) send."""
    assert client.generate(model=LLM, keep_alive=0).done_reason == "unload"
    assert LLM not in _running(client)
    loaded = client.generate(model=LLM, prompt="")
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    assert LLM in _running(client)
    assert client.chat(model=LLM, messages=[], keep_alive=0).done_reason == "unload"
    assert LLM not in _running(client)
    assert client.chat(model=LLM, messages=[], keep_alive=-1).done_reason == "load"
    assert _running(client)[LLM].expires_at.year == _NEVER_YEAR
    with pytest.raises(ollama.ResponseError) as wrong_task:
        client.generate(model=EMBED)  # loading for generation needs a generation model
    assert wrong_task.value.status_code == 400


def test_embed_keep_alive_zero_unloads_and_the_next_embed_loads_it_again(client: ollama.Client) -> None:
    warm = client.embed(model=EMBED, input="hello world")
    client.embed(model=EMBED, input="hello world", keep_alive=0)
    assert EMBED not in _running(client)
    cold = client.embed(model=EMBED, input="hello world")
    assert EMBED in _running(client)
    assert cold.embeddings[0] == pytest.approx(warm.embeddings[0], abs=1e-5)
    assert warm.load_duration and cold.load_duration
    assert cold.load_duration >= _LOAD_AT_LEAST_NS and cold.load_duration > 10 * warm.load_duration


def test_images_reach_a_vlm_as_base64(vlm_server: Server) -> None:
    """The ollama client sends images as base64 (bytes here); the VLM sees them (its prompt grows by
    the image's tokens), in chat and generate alike."""
    client = ollama.Client(host=vlm_server.url, timeout=120)
    red = images.solid((255, 0, 0))
    options = {"temperature": 0, "num_predict": 4}
    plain = client.chat(
        model=vlm_server.model_name, messages=[{"role": "user", "content": "What is it?"}], options=options
    )
    seen = client.chat(
        model=vlm_server.model_name,
        messages=[{"role": "user", "content": "What is it?", "images": [red]}],
        options=options,
        stream=False,
    )
    assert seen.prompt_eval_count and plain.prompt_eval_count
    assert seen.prompt_eval_count > plain.prompt_eval_count
    generated = client.generate(model=vlm_server.model_name, prompt="What is it?", images=[red], options=options)
    assert generated.done and generated.prompt_eval_count == seen.prompt_eval_count
    with pytest.raises(ollama.ResponseError) as corrupt:
        client.chat(
            model=vlm_server.model_name,
            messages=[{"role": "user", "content": "x", "images": [images.corrupt_png()]}],
            options=options,
        )
    assert corrupt.value.status_code == 400 and "messages.0.images.0" in corrupt.value.error
