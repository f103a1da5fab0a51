"""Bad Ollama requests get a 4xx in Ollama's error shape (``{"error": "..."}``, naming what to fix)
and no engine work; never a 5xx."""

from __future__ import annotations

from typing import Any

import pytest

from ovserve.engine.messages import AddRequest
from tests.fast.harness import MODEL, fast_model
from tests.fast.scripted_engine import reply

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}

# (case, path, body, status, a word the message must hold)
CASES: list[tuple[str, str, dict[str, Any] | bytes, int, str]] = [
    ("invalid json", "/api/chat", b'{"model": "fast-model", "messages": [', 400, "JSON"),
    ("json array body", "/api/chat", b"[1, 2]", 400, "object"),
    ("missing model", "/api/chat", {"model": None, "messages": [USER]}, 400, "model"),
    ("empty model", "/api/chat", {"model": "", "messages": [USER]}, 400, "model"),
    ("unknown model", "/api/chat", {"model": "llama9", "messages": [USER]}, 404, "llama9"),
    ("messages not a list", "/api/chat", {"messages": "hi"}, 400, "messages"),
    ("unknown role", "/api/chat", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    ("content a number", "/api/chat", {"messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
    ("images not base64", "/api/chat", {"messages": [{**USER, "images": ["not base64!"]}]}, 400, "image"),
    ("images to a text-only model", "/api/chat", {"messages": [{**USER, "images": ["iVBORw0KGgo="]}]}, 400, "image"),
    ("stream a string", "/api/chat", {"messages": [USER], "stream": "yes"}, 400, "stream"),
    ("temperature out of range", "/api/chat", {"messages": [USER], "options": {"temperature": 9}}, 400, "temperature"),
    ("temperature a string", "/api/chat", {"messages": [USER], "options": {"temperature": "hot"}}, 400, "temperature"),
    ("top_p zero", "/api/chat", {"messages": [USER], "options": {"top_p": 0}}, 400, "top_p"),
    ("negative top_k", "/api/chat", {"messages": [USER], "options": {"top_k": -5}}, 400, "top_k"),
    ("num_predict zero", "/api/chat", {"messages": [USER], "options": {"num_predict": 0}}, 400, "num_predict"),
    ("stop a string", "/api/chat", {"messages": [USER], "options": {"stop": "\n"}}, 400, "stop"),
    ("empty stop", "/api/chat", {"messages": [USER], "options": {"stop": [""]}}, 400, "stop"),
    ("seed too large", "/api/chat", {"messages": [USER], "options": {"seed": 2**40}}, 400, "seed"),
    ("options not an object", "/api/chat", {"messages": [USER], "options": [1]}, 400, "options"),
    ("num_ctx zero", "/api/chat", {"messages": [USER], "options": {"num_ctx": 0}}, 400, "num_ctx"),
    ("format unknown word", "/api/chat", {"messages": [USER], "format": "yaml"}, 400, "format"),
    ("format an invalid schema", "/api/chat", {"messages": [USER], "format": {"type": "nonsense"}}, 400, "format"),
    ("think an unknown level", "/api/chat", {"messages": [USER], "think": "max"}, 400, "think"),
    ("think on a model without reasoning", "/api/chat", {"messages": [USER], "think": True}, 400, "thinking"),
    ("keep_alive malformed", "/api/chat", {"messages": [USER], "keep_alive": "soon"}, 400, "duration"),
    ("tool without a name", "/api/chat", {"messages": [USER], "tools": [{"function": {}}]}, 400, "tools.0"),
    ("tool_choice names no tool", "/api/chat", {"messages": [USER], "tools": [TOOL], "tool_choice": "f"}, 400, "f"),
    ("tool_choice without tools", "/api/chat", {"messages": [USER], "tool_choice": "required"}, 400, "tools"),
    (
        "forced call with a format",
        "/api/chat",
        {"messages": [USER], "tools": [TOOL], "tool_choice": "required", "format": "json"},
        400,
        "format",
    ),
    (
        "tool call arguments a string",
        "/api/chat",
        {
            "messages": [
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
            ]
        },
        400,
        "arguments",
    ),
    ("prompt a list", "/api/generate", {"prompt": ["a"]}, 400, "prompt"),
    ("go template", "/api/generate", {"prompt": "hi", "template": "{{ .Prompt }}"}, 400, "template"),
    ("suffix", "/api/generate", {"prompt": "def f(", "suffix": ")"}, 400, "suffix"),
    ("context", "/api/generate", {"prompt": "hi", "context": [1, 2]}, 400, "context"),
    ("raw with images", "/api/generate", {"prompt": "hi", "raw": True, "images": ["iVBORw0KGgo="]}, 400, "images"),
    ("raw with format", "/api/generate", {"prompt": "hi", "raw": True, "format": "json"}, 400, "format"),
    ("raw with think", "/api/generate", {"prompt": "hi", "raw": True, "think": "low"}, 400, "think"),
    # Refused for what the body is, also when it only loads the model (no prompt).
    ("go template in a load", "/api/generate", {"template": "{{ .Prompt }}"}, 400, "template"),
    ("raw with format in a load", "/api/generate", {"raw": True, "format": "json"}, 400, "format"),
    ("keep_alive with spaces", "/api/generate", {"keep_alive": " 5"}, 400, "duration"),
    ("embed an empty string", "/api/embed", {"input": ["a", ""]}, 400, "input"),
    ("prompt too long", "/api/generate", {"prompt": "x" * 5000}, 400, "prompt"),
    ("embed to a chat model", "/api/embed", {"input": "hi"}, 400, "embeddings"),
    ("embed an empty list", "/api/embed", {"input": []}, 400, "input"),
    ("embed input a number", "/api/embed", {"input": 5}, 400, "input"),
    ("embeddings without prompt", "/api/embeddings", {}, 400, "prompt"),
    ("show without model", "/api/show", {"model": None}, 400, "model"),
    ("show an unknown model", "/api/show", {"model": "llama9"}, 404, "llama9"),
    ("pull", "/api/pull", {"model": "llama3"}, 400, "ovserve export"),
    ("create", "/api/create", {"model": "mine", "from": "llama3"}, 400, "ovserve export"),
    ("copy", "/api/copy", {"source": MODEL, "destination": "x"}, 400, "ovserve export"),
    ("push", "/api/push", {"model": MODEL}, 400, "ovserve export"),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "word"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
async def test_bad_input_is_a_4xx_in_ollamas_shape(serve, path, body, status, word) -> None:
    served = await serve(fast_model(reply("never")))
    if isinstance(body, dict):
        data = ({"model": MODEL} | body) if path != "/api/copy" else body
        data = {key: value for key, value in data.items() if value is not None}
        response = await served.client.post(path, json=data)
    else:
        response = await served.client.post(path, data=body, headers={"Content-Type": "application/json"})
    answer = await response.json()
    assert response.status == status, answer
    assert set(answer) == {"error"} and isinstance(answer["error"], str)
    assert word.lower() in answer["error"].lower(), answer
    assert not [command for command in served.engine.received if isinstance(command, AddRequest)]


async def test_delete_and_wrong_methods_answer_in_ollamas_shape(serve) -> None:
    served = await serve(fast_model())
    response = await served.client.delete("/api/delete", json={"model": MODEL})
    assert response.status == 400 and "ovserve export" in (await response.json())["error"]
    response = await served.client.get("/api/chat")
    assert response.status == 405 and set(await response.json()) == {"error"}
