"""Property: any request body, valid or not, gets a 2xx or a 4xx in OpenAI's shape, promptly, and
leaves no engine request behind.

Hypothesis draws bodies over the request schema of both endpoints: every modelled field, fields of
the policy table and unknown ones, with values mostly in range and sometimes of the wrong type or
out of range. Outputs are kept short (max_tokens <= 8 or the model's default 64) so the run stays
bounded.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Server

ODD = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.just([]), st.just({}), st.integers(-5, 5))


def _number(low: float, high: float) -> st.SearchStrategy[Any]:
    return st.one_of(st.floats(low, high, allow_nan=False), st.integers(int(low), int(high)))


MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
        "content": st.one_of(
            st.text(max_size=30),
            st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}), max_size=2),
        ),
    }
)
BAD_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "wizard"]),
        "content": st.one_of(st.none(), st.integers(), st.just([{"type": "image_url", "image_url": "data:,"}])),
    }
)

# Each field: values in its documented range (sometimes at the edges, which may still be refused,
# e.g. n above best_of), then odd values (wrong types, out of range). max_tokens is never null:
# "no limit" would run to the context, which is tested elsewhere and too slow for a property run.
COMMON: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "stream": (st.booleans(), ODD),
    "stream_options": (st.fixed_dictionaries({"include_usage": st.booleans()}), ODD),
    "max_tokens": (st.integers(1, 8), st.one_of(st.integers(-1, 0), st.text(max_size=2))),
    "temperature": (_number(0, 2), _number(-1, 3)),
    "top_p": (st.floats(0.05, 1.0), _number(-0.5, 1.5)),
    "top_k": (st.one_of(st.integers(-1, 50), st.none()), st.one_of(st.integers(-5, -2), st.text(max_size=2))),
    "min_p": (st.floats(0.0, 0.9), _number(-0.5, 1.5)),
    "repetition_penalty": (st.floats(0.5, 2.0), _number(-1, 0)),
    "presence_penalty": (_number(-2, 2), _number(-3, 3)),
    "frequency_penalty": (_number(-2, 2), _number(-3, 3)),
    "seed": (st.integers(0, 2**32 - 1), st.one_of(st.integers(-1, 2**33), ODD)),
    "stop": (st.one_of(st.text(min_size=1, max_size=3), st.lists(st.text(min_size=1, max_size=3), max_size=4)), ODD),
    "stop_token_ids": (st.lists(st.integers(0, 5000), max_size=3), st.lists(st.integers(-2, -1), min_size=1)),
    "ignore_eos": (st.booleans(), ODD),
    "include_stop_str_in_output": (st.booleans(), ODD),
    "skip_special_tokens": (st.booleans(), ODD),
    "n": (st.integers(1, 4), st.one_of(st.integers(-1, 25), ODD)),
    "best_of": (st.integers(1, 4), st.one_of(st.integers(-1, 25), ODD)),
    "length_penalty": (_number(-3, 3), ODD),
    "response_format": (st.just({"type": "text"}), st.one_of(st.just({"type": "xml"}), ODD)),
    "logit_bias": (st.just({}), st.one_of(st.just({"5": 3}), ODD)),
    "repeat_penalty": (st.floats(0.5, 2.0), ODD),
    "repeat_last_n": (st.just(-1), st.one_of(st.integers(0, 64), ODD)),
    "mirostat": (st.just(0), st.one_of(st.integers(1, 2), ODD)),
    "user": (st.text(max_size=5), ODD),
    "cache_prompt": (st.booleans(), ODD),
    "some_unknown_field": (ODD, ODD),
}
CHAT: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    **COMMON,
    "messages": (st.lists(MESSAGE, min_size=1, max_size=3), st.one_of(st.lists(BAD_MESSAGE, min_size=1), ODD)),
    "max_completion_tokens": (st.integers(1, 8), st.one_of(st.integers(-1, 0), st.text(max_size=2))),
    "logprobs": (st.booleans(), ODD),
    "top_logprobs": (st.just(0), st.one_of(st.integers(1, 3), ODD)),
    "tools": (st.just([{"type": "function", "function": {"name": "f"}}]), ODD),
    "tool_choice": (st.sampled_from(["auto", "none", "required"]), ODD),
    "response_format": (
        st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "const_string", "value": "ok"}]),
        st.one_of(st.just({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}), ODD),
    ),
    "chat_template_kwargs": (st.just({"enable_thinking": False}), st.one_of(st.just({"messages": 1}), ODD)),
}
COMPLETIONS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    **COMMON,
    "prompt": (
        st.one_of(st.text(max_size=20), st.lists(st.text(max_size=10), min_size=1, max_size=3)),
        st.one_of(st.just([]), st.lists(st.integers(0, 9), min_size=1), ODD),
    ),
    "echo": (st.booleans(), ODD),
    "logprobs": (st.just(0), st.one_of(st.integers(1, 3), ODD)),
    "suffix": (st.just(""), st.one_of(st.text(min_size=1, max_size=3), ODD)),
}


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    chat = draw(st.booleans())
    fields = CHAT if chat else COMPLETIONS
    # Half the bodies keep every value in range, so that many reach the engine.
    in_range = draw(st.booleans())

    def value(name: str) -> Any:
        valid, odd = fields[name]
        return draw(valid if in_range or draw(st.integers(0, 2)) > 0 else odd)

    body: dict[str, Any] = {"model": "tiny-llm" if in_range else draw(st.sampled_from(["tiny-llm", "other", 3]))}
    required = "messages" if chat else "prompt"
    if in_range or draw(st.integers(0, 9)) > 0:  # sometimes missing
        body[required] = value(required)
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=6, unique=True)):
        body[name] = value(name)
    if "max_tokens" not in body and draw(st.booleans()):
        body["max_tokens"] = draw(st.integers(1, 8))
    return ("/v3/chat/completions" if chat else "/v3/completions"), body


def _check(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    with client.stream("POST", path, json=body) as response:
        response.read()
    assert response.status_code in {200, 400, 404, 422}, (response.status_code, body, response.text)
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], body
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", body
        assert not any("error" in json.loads(event) for event in events[:-1]), (body, events)
    else:
        assert response.json()["choices"], body


def test_any_request_gets_a_4xx_or_a_response_and_frees_the_engine(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as client:

        @settings(
            max_examples=60,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests())
        def property_holds(request: tuple[str, dict[str, Any]]) -> None:
            _check(client, *request)

        property_holds()

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if server.metric("ovserve_inflight_requests") == 0 and server.metric("ovserve_engine_requests") == 0:
            break
        time.sleep(0.1)
    assert server.metric("ovserve_inflight_requests") == 0
    assert server.metric("ovserve_engine_requests") == 0
    assert server.metric("ovserve_engine_handles") == 0
