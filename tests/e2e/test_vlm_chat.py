"""Images in chat completions: every accepted image_url form, through the openai SDK and a real VLM.

tiny-vlm is a random LLaVA: its text is gibberish, but greedy output is a deterministic function
of the prompt *and* the pixels, which is what these tests rely on.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests import images
from tests.conftest import Server, start_server
from tests.e2e.conftest import MediaFiles
from tests.media_server import MediaServer

QUESTION = "What is in this picture?"
# tiny-vlm: 56 px / 14 px patches = 16 image tokens per image, plus the "\n" openvino_genai adds.
TOKENS_PER_IMAGE = 17
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 16}


def image_part(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def user(*parts: dict[str, Any] | str) -> dict[str, Any]:
    content = [{"type": "text", "text": part} if isinstance(part, str) else part for part in parts]
    return {"role": "user", "content": content}


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return client.chat.completions.create(model="tiny-vlm", messages=messages, **{**GREEDY, **kwargs})  # type: ignore[arg-type]


def ask_text(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
    return ask(client, messages).choices[0].message.content


def ask_stream(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, Any]:
    stream = ask(client, messages, stream=True, stream_options={"include_usage": True})
    text, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    return "".join(text), usage


# Each form builds the image_url part from the fixtures; all show a red 40x30 picture (the JPEG
# one approximately), except the form that tests MindIE's plain-string URL.
FORMS: dict[str, Callable[[MediaServer, MediaFiles], dict[str, Any]]] = {
    "data url png": lambda http, files: image_part(images.data_url(images.solid(images.RED))),
    "data url jpeg": lambda http, files: image_part(images.data_url(images.solid(images.RED, "JPEG"), "image/jpeg")),
    "data url webp": lambda http, files: image_part(images.data_url(images.solid(images.RED, "WEBP"), "image/webp")),
    "data url bmp": lambda http, files: image_part(images.data_url(images.solid(images.RED, "BMP"), "image/bmp")),
    "data url gif": lambda http, files: image_part(images.data_url(images.solid(images.RED, "GIF"), "image/gif")),
    "data url upper-case scheme": lambda http, files: image_part(
        images.data_url(images.solid(images.RED)).replace("data:image/png;base64", "DATA:image/PNG;BASE64")
    ),
    "http url": lambda http, files: image_part(f"{http.origin}/img/red.png"),
    "http url with detail": lambda http, files: image_part(f"{http.origin}/img/red.png", detail="low"),
    "http url, mindie plain string": lambda http, files: {
        "type": "image_url",
        "image_url": f"{http.origin}/img/red.png",
    },
    "http redirects within the allowed host": lambda http, files: image_part(f"{http.origin}/chain/3"),
    "local path": lambda http, files: image_part(str(files.root / "red.png")),
    "local path with .. that stays inside": lambda http, files: image_part(str(files.root / "sub" / ".." / "red.png")),
    "local path, mindie plain string": lambda http, files: {
        "type": "image_url",
        "image_url": str(files.root / "red.png"),
    },
    "file url": lambda http, files: image_part((files.root / "red.png").as_uri()),
    "file url with localhost": lambda http, files: image_part(f"file://localhost{files.root / 'red.png'}"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_image_url_form_works_unary_and_streaming(
    form: str, vlm_client: openai.OpenAI, good_http: MediaServer, media_files: MediaFiles
) -> None:
    text_only = ask(vlm_client, [user(QUESTION)]).usage.prompt_tokens
    messages = [user(FORMS[form](good_http, media_files), QUESTION)]
    unary = ask(vlm_client, messages)
    streamed, stream_usage = ask_stream(vlm_client, messages)
    assert unary.choices[0].message.content
    assert streamed == unary.choices[0].message.content
    assert unary.usage.prompt_tokens == text_only + TOKENS_PER_IMAGE
    assert stream_usage.prompt_tokens == unary.usage.prompt_tokens


def test_mindie_plain_string_form_over_raw_http(vlm_server: Server, good_http: MediaServer) -> None:
    body = {
        "model": "tiny-vlm",
        "messages": [user({"type": "image_url", "image_url": f"{good_http.origin}/img/red.png"}, QUESTION)],
        **GREEDY,
    }
    response = httpx.post(f"{vlm_server.url}/v3/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert good_http.paths() == ["/img/red.png"]


def test_red_and_blue_images_give_different_greedy_text(vlm_client: openai.OpenAI) -> None:
    red = ask_text(vlm_client, [user(image_part(images.data_url(images.solid(images.RED))), QUESTION)])
    blue = ask_text(vlm_client, [user(image_part(images.data_url(images.solid(images.BLUE))), QUESTION)])
    text_only = ask_text(vlm_client, [user(QUESTION)])
    assert red != blue
    assert text_only not in (red, blue)


def test_same_pixels_from_every_source_give_the_same_text(
    vlm_client: openai.OpenAI, good_http: MediaServer, media_files: MediaFiles
) -> None:
    sources = [
        images.data_url(images.solid(images.RED)),
        f"{good_http.origin}/img/red.png",
        str(media_files.root / "red.png"),
        (media_files.root / "red.png").as_uri(),
    ]
    answers = {ask_text(vlm_client, [user(image_part(url), QUESTION)]) for url in sources}
    assert len(answers) == 1


def test_alpha_palette_and_animation_are_converted_to_rgb(vlm_client: openai.OpenAI) -> None:
    def answer(body: bytes, mime: str = "image/png") -> str:
        return ask_text(vlm_client, [user(image_part(images.data_url(body, mime)), QUESTION)])

    # Transparent pixels are flattened onto white; a palette image reads as its colours; an
    # animation as its first frame.
    assert answer(images.rgba_transparent()) == answer(images.solid(images.WHITE))
    assert answer(images.palette(images.BLUE)) == answer(images.solid(images.BLUE))
    first_red = answer(images.animated_gif(images.RED, images.BLUE), "image/gif")
    assert first_red == answer(images.solid(images.RED))
    assert first_red != answer(images.animated_gif(images.BLUE, images.RED), "image/gif")


def test_several_images_in_one_message_and_across_messages(vlm_client: openai.OpenAI) -> None:
    red = image_part(images.data_url(images.solid(images.RED)))
    blue = image_part(images.data_url(images.solid(images.BLUE)))
    one = ask(vlm_client, [user(red, QUESTION)])
    red_blue = ask(vlm_client, [user(red, blue, QUESTION)])
    blue_red = ask(vlm_client, [user(blue, red, QUESTION)])
    across = ask(
        vlm_client,
        [user(red, "Remember this."), {"role": "assistant", "content": "Done."}, user(blue, "And this one?")],
    )
    assert red_blue.usage.prompt_tokens == one.usage.prompt_tokens + TOKENS_PER_IMAGE
    # Images land where their parts are: swapping them changes the answer.
    assert red_blue.choices[0].message.content != blue_red.choices[0].message.content
    assert across.choices[0].message.content
    two_turns_text = ask(
        vlm_client, [user("Remember this."), {"role": "assistant", "content": "Done."}, user("And this one?")]
    )
    assert across.usage.prompt_tokens == two_turns_text.usage.prompt_tokens + 2 * TOKENS_PER_IMAGE


def test_image_and_text_only_requests_share_the_engine(vlm_client: openai.OpenAI) -> None:
    conversations = [
        [user(image_part(images.data_url(images.solid(images.RED))), QUESTION)],
        [user(QUESTION)],
        [user(image_part(images.data_url(images.solid(images.BLUE))), QUESTION)],
        [user("Tell me a story.")],
    ] * 2
    alone = [ask_text(vlm_client, messages) for messages in conversations[:4]]
    # Sent together, text-only and image requests are scheduled in the same engine steps; each
    # must still get exactly the answer it gets alone.
    with concurrent.futures.ThreadPoolExecutor(len(conversations)) as pool:
        together = list(pool.map(lambda messages: ask_text(vlm_client, messages), conversations))
    assert together == alone * 2


def test_text_only_request_to_a_vlm(vlm_client: openai.OpenAI) -> None:
    completion = ask(vlm_client, [{"role": "user", "content": "Hello there"}])
    assert completion.choices[0].message.content
    assert completion.usage.prompt_tokens > 0


def test_reserved_placeholders_in_text_are_refused(vlm_client: openai.OpenAI) -> None:
    for text in ("<image> what is this?", "look: <ov_genai_image_0>"):
        with pytest.raises(openai.BadRequestError) as caught:
            ask(vlm_client, [user(text)])
        assert "reserved image placeholder" in str(caught.value)


def test_completions_on_a_vlm_send_the_prompt_text(vlm_client: openai.OpenAI) -> None:
    """A VLM pipeline takes text, never token ids (ids failed every /v3/completions request with a
    500, and under concurrent load killed the engine process)."""
    prompt = "def fibonacci(n):\n    "
    alone = vlm_client.completions.create(model="tiny-vlm", prompt=prompt, max_tokens=8, temperature=0)
    batch = vlm_client.completions.create(model="tiny-vlm", prompt=["Hello there", prompt], max_tokens=8, temperature=0)
    assert alone.choices[0].text and batch.choices[1].text == alone.choices[0].text
    assert alone.usage is not None and alone.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError) as caught:
        vlm_client.completions.create(model="tiny-vlm", prompt="look: <ov_genai_image_0>", max_tokens=8)
    assert caught.value.body["param"] == "prompt"  # type: ignore[index]
    assert "reserved image placeholder" in str(caught.value)


@pytest.fixture(scope="module")
def default_vlm_server(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """tiny-vlm with no media flags: only data URLs are allowed."""
    running = start_server(tmp_path_factory.mktemp("vlm-default"), tiny_vlm, model_name="tiny-vlm")
    yield running
    running.stop()


def test_without_flags_only_data_urls_are_accepted(
    default_vlm_server: Server, good_http: MediaServer, media_files: MediaFiles
) -> None:
    client = default_vlm_server.client()
    assert ask_text(client, [user(image_part(images.data_url(images.solid(images.RED))), QUESTION)])
    refused = {
        f"{good_http.origin}/img/red.png": "--allowed_media_domains",
        str(media_files.root / "red.png"): "--allowed_local_media_path",
        (media_files.root / "red.png").as_uri(): "--allowed_local_media_path",
    }
    for url, flag in refused.items():
        with pytest.raises(openai.BadRequestError) as caught:
            ask(client, [user(image_part(url), QUESTION)])
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "image_url_not_allowed"
        assert flag in error["message"]
        assert error["param"] == "messages.0.content.0.image_url"
    assert good_http.paths() == []
