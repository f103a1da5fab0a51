"""Every generation pipeline under default settings: many repeated and many concurrent requests.

Each variant is one server started with the command line's defaults (prefix caching on, the
model's generation_config.json sampling) and nothing but the flag that picks the pipeline. It
gets 45 requests one after another (three shapes: a short chat, a longer chat whose prompt
repeats, a completion; unary and streamed; greedy and with the model's default sampling) and 16
at once. Regression for issue 21: a speculative server failed 5-14 of the 45 and 15-16 of the
16 concurrent requests with a 500 (openvino_genai's sampled speculative decoding broke ``step()``
once prefix caching was on; scripts/repro/speculative_prefix_cache.py); and every completion on a
VLM was a 500. Greedy outputs that differ under concurrent load because of a known engine bug are
an xfail naming its reproduction (scripts/repro/); every other assertion still holds for that
variant.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import images
from tests.conftest import Server, start_server

MAX_TOKENS = 12
REPEATS = 15  # x 3 shapes = 45 requests one after another
CONCURRENT = 16
TIMEOUT_S = 120.0
DRAFT = "<the demo draft model>"


@dataclass(frozen=True)
class Variant:
    name: str
    model: str  # a demo model (scripts/make_demo_models.py)
    args: tuple[str, ...] = ()  # the flags that pick the pipeline; DRAFT stands for the draft's directory
    # usage.prompt_tokens_details.cached_tokens: "counted" (what the engine's prefix cache served;
    # 0 is possible: a small cache grown on demand overwrites its blocks), "zero" (no prefix
    # cache), or "absent" (unknown, left out: VLM prompts).
    cached_tokens: str = "counted"
    image: bool = False  # the longer chat carries an image
    # Why greedy outputs may differ under concurrent load (a known engine bug), else None.
    concurrent_greedy_drift: str | None = None
    startup_warning: str | None = None  # what the server must say about its settings at startup


VARIANTS = [
    Variant("continuous_batching", "tiny-llm"),
    # Prefix caching is turned off for speculative pipelines (ovserve.settings.schema), so nothing is cached.
    Variant(
        "speculative",
        "tiny-llm",
        ("--draft_models_path", DRAFT),
        cached_tokens="zero",
        startup_warning="prefix caching is turned off for model 'tiny-llm'",
        concurrent_greedy_drift="openvino_genai 2026.4: a prompt whose prefill is split across steps while other "
        "requests run gets a wrong first token with a draft model (scripts/repro/speculative_split_prefill.py)",
    ),
    Variant("prompt_lookup", "tiny-llm", ("--plugin_config", '{"prompt_lookup": true}')),
    Variant("stateful", "tiny-llm", ("--pipeline_type", "LM"), cached_tokens="zero"),
    Variant(
        "vlm",
        "tiny-vlm",
        cached_tokens="absent",
        image=True,
        concurrent_greedy_drift="openvino_genai 2026.4 VLM with prefix caching: a greedy request arriving a step "
        "after a sampled one with the same prompt can get another output (scripts/repro/vlm_prefix_cache_drift.py)",
    ),
]

LONG_QUESTION = (
    "Tell me about the sea, the ships that sail on it, the fish that swim in it and the storms "
    "that cross it in winter, and then about the harbours where the ships wait for the spring. "
)


@dataclass(frozen=True)
class Shape:
    name: str
    path: str  # under /v3

    def body(self, variant: Variant) -> dict[str, Any]:
        if self.name == "completion":
            return {"prompt": "def fibonacci(n):\n    "}
        if self.name == "short_chat":
            return {"messages": [{"role": "user", "content": "hello there"}]}
        question: Any = LONG_QUESTION * 2
        if variant.image:
            image = {"type": "image_url", "image_url": {"url": images.data_url(images.solid(images.RED))}}
            question = [{"type": "text", "text": question}, image]
        return {
            "messages": [
                {"role": "system", "content": "You are a helpful assistant who answers briefly."},
                {"role": "user", "content": question},
            ]
        }


SHAPES = [
    Shape("short_chat", "chat/completions"),
    Shape("long_chat", "chat/completions"),
    Shape("completion", "completions"),
]
# (stream, greedy): greedy requests ignore EOS so their whole output is comparable; the others
# use the model's generation_config.json (sampling) as a client sending no settings would.
MODES = [(False, True), (True, True), (False, False), (True, False)]


@dataclass(frozen=True)
class Result:
    shape: str
    stream: bool
    greedy: bool
    status: int
    error: str | None = None
    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    def describe(self) -> str:
        mode = f"{'stream' if self.stream else 'unary'}, {'greedy' if self.greedy else 'sampled'}"
        return f"{self.shape} ({mode}): {self.status} {self.error}"


def send(server: Server, variant: Variant, shape: Shape, stream: bool, greedy: bool) -> Result:
    body: dict[str, Any] = {"model": server.model_name, "max_tokens": MAX_TOKENS, **shape.body(variant)}
    if greedy:
        body.update(temperature=0, ignore_eos=True)
    url = f"{server.url}/v3/{shape.path}"
    common: dict[str, Any] = {"shape": shape.name, "stream": stream, "greedy": greedy}
    if not stream:
        response = httpx.post(url, json=body, timeout=TIMEOUT_S)
        if response.status_code != 200:
            return Result(**common, status=response.status_code, error=response.text[:300])
        payload = response.json()
        choice = payload["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        finish_reason = choice["finish_reason"]
        return Result(**common, status=200, text=text or "", finish_reason=finish_reason, usage=payload["usage"])
    body.update(stream=True, stream_options={"include_usage": True})
    text, finish_reason, usage = "", None, None
    with httpx.stream("POST", url, json=body, timeout=TIMEOUT_S) as response:
        if response.status_code != 200:
            return Result(**common, status=response.status_code, error=response.read().decode()[:300])
        lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    if not lines or lines[-1] != "[DONE]":
        return Result(**common, status=200, error=f"the stream did not end with [DONE]: {lines[-1:]}")
    for line in lines[:-1]:
        chunk = json.loads(line)
        if "error" in chunk:
            return Result(**common, status=200, error=json.dumps(chunk["error"])[:300])
        for choice in chunk["choices"]:
            text += choice.get("delta", {}).get("content") or choice.get("text") or ""
            finish_reason = choice.get("finish_reason") or finish_reason
        usage = chunk.get("usage") or usage
    return Result(**common, status=200, text=text, finish_reason=finish_reason, usage=usage)


@pytest.fixture(scope="module", params=VARIANTS, ids=[variant.name for variant in VARIANTS])
def variant(request: pytest.FixtureRequest) -> Variant:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def variant_server(
    variant: Variant, demo_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    args = [str(demo_models["tiny-draft"]) if arg == DRAFT else arg for arg in variant.args]
    server = start_server(
        tmp_path_factory.mktemp(variant.name), demo_models[variant.model], *args, model_name=variant.model
    )
    yield server
    server.stop()


def assert_all_succeeded(results: list[Result], server: Server) -> None:
    failed = [result for result in results if not result.ok]
    assert not failed, (
        f"{len(failed)} of {len(results)} requests failed:\n"
        + "\n".join(result.describe() for result in failed[:5])
        + "\n--- server log (tail) ---\n"
        + "\n".join(server.log().splitlines()[-15:])
    )


def assert_consistent(results: list[Result], variant: Variant) -> list[str]:
    """What a client sees of one shape's results: the same prompt count every time, token counts
    that add up, non-empty greedy text, cached tokens as the pipeline's prefix cache (or its
    absence) explains. Returns the shapes whose greedy text differs across requests or transports."""
    drifted = []
    for shape in SHAPES:
        mine = [result for result in results if result.shape == shape.name]
        if not mine:
            continue
        usages = [result.usage for result in mine]
        assert all(usage is not None for usage in usages), f"{shape.name}: a response without usage"
        prompt_tokens = {usage["prompt_tokens"] for usage in usages if usage}
        assert len(prompt_tokens) == 1, f"{shape.name}: prompt_tokens differ across repeats: {prompt_tokens}"
        for result in mine:
            usage = result.usage or {}
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
            assert 1 <= usage["completion_tokens"] <= MAX_TOKENS, usage
            if result.finish_reason == "length":
                assert usage["completion_tokens"] == MAX_TOKENS, usage
            cached = usage.get("prompt_tokens_details", {}).get("cached_tokens")
            if variant.cached_tokens == "absent":
                assert cached is None, usage
            elif variant.cached_tokens == "zero":
                assert cached == 0, usage
            else:
                assert cached is not None and 0 <= cached < usage["prompt_tokens"], usage
        greedy = [result for result in mine if result.greedy]
        assert all(result.text.strip() for result in greedy), f"{shape.name}: empty greedy output"
        assert all(result.usage and result.usage["completion_tokens"] == MAX_TOKENS for result in greedy)
        if len({result.text for result in greedy}) > 1:
            drifted.append(shape.name)
    return drifted


def test_repeated_requests_all_succeed_with_consistent_outputs(variant: Variant, variant_server: Server) -> None:
    results = [
        send(variant_server, variant, shape, *MODES[repeat % len(MODES)])
        for repeat in range(REPEATS)
        for shape in SHAPES
    ]
    assert_all_succeeded(results, variant_server)
    drifted = assert_consistent(results, variant)
    assert not drifted, f"greedy outputs differ across repeats: {drifted}"
    if variant.startup_warning is not None:
        assert variant.startup_warning in variant_server.log()


def test_concurrent_requests_all_succeed_with_consistent_outputs(variant: Variant, variant_server: Server) -> None:
    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        futures = [
            pool.submit(send, variant_server, variant, SHAPES[index % len(SHAPES)], *MODES[index % len(MODES)])
            for index in range(CONCURRENT)
        ]
        results = [future.result() for future in futures]
    assert_all_succeeded(results, variant_server)
    drifted = assert_consistent(results, variant)
    if drifted and variant.concurrent_greedy_drift:
        pytest.xfail(f"greedy outputs differ under load ({drifted}): {variant.concurrent_greedy_drift}")
    assert not drifted, f"greedy outputs differ across concurrent requests: {drifted}"
