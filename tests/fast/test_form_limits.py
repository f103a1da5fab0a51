"""aiohttp's bounds on a multipart form, as the audio routes answer them: a form with too many
fields or too long a part header is a 400 naming the limit; 413 is kept for a body over
--max_request_mb."""

from __future__ import annotations

from typing import Any

from tests.fast.harness import MODEL, fast_model

BOUNDARY = "xBOUNDARYx"
TRANSCRIPTIONS = "/v3/audio/transcriptions"


def _part(name: str, value: str, headers: str = "") -> str:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n{headers}\r\n{value}\r\n'


def _form(*, extra_fields: int = 0, header_pad: int = 0, file_bytes: int = 4) -> tuple[bytes, dict[str, str]]:
    """An audio upload, written by hand: aiohttp's client would refuse none of these, but its
    FormData cannot write a header line this long."""
    pad = f"X-Pad: {'a' * header_pad}\r\n" if header_pad else ""
    parts = [_part("model", MODEL, pad), *(_part(f"extra{i}", "v") for i in range(extra_fields))]
    upload = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        f"Content-Type: audio/wav\r\n\r\n{'R' * file_bytes}\r\n--{BOUNDARY}--\r\n"
    )
    return "".join(parts).encode() + upload.encode(), {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


async def _post(served: Any, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    async with served.client.post(TRANSCRIPTIONS, data=body, headers=headers) as response:
        return response.status, await response.json()


async def test_a_form_with_a_thousand_extra_fields_is_a_400_naming_the_limit(serve) -> None:
    served = await serve(fast_model())
    body, headers = _form(extra_fields=1000)
    assert len(body) < 100_000  # far under --max_request_mb
    status, answer = await _post(served, body, headers)
    assert status == 400, answer
    error = answer["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "too_many_form_fields"
    assert "more than 1000 fields" in error["message"]


async def test_a_part_header_line_too_long_is_a_400_naming_the_limit(serve) -> None:
    served = await serve(fast_model())
    status, answer = await _post(served, *_form(header_pad=9000))
    assert status == 400, answer
    assert answer["error"]["code"] == "form_header_too_long"
    assert "longer than 8190 bytes" in answer["error"]["message"]
    assert "aaaa" not in answer["error"]["message"]  # the client's own bytes are not echoed


async def test_only_a_form_over_max_request_mb_is_a_413(serve) -> None:
    served = await serve(fast_model(), max_request_mb=0.05)  # 52,428 bytes
    status, answer = await _post(served, *_form(file_bytes=60_000))
    assert status == 413, answer
    assert answer["error"]["code"] == "payload_too_large"
    assert "--max_request_mb (0.05 MB)" in answer["error"]["message"]
    # Under the limit, the form is read and the request goes on (to the model's task check).
    status, answer = await _post(served, *_form(file_bytes=40_000))
    assert status == 400 and answer["error"]["code"] == "wrong_model_task", answer
