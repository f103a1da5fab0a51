"""The Files and Batch APIs through the app, over the scripted engine: a batch's answers are the
interactive answers, files and batches are private to their key, and bad input is a 4xx in
OpenAI's shape (never a 500, never a batch stuck in ``validating``)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import aiohttp
import pytest

from tests.fast.harness import MODEL, Served, eventually, fast_model
from tests.fast.scripted_engine import reply
from tests.fast.test_routing_metrics import held_after_first_token, of, samples

CHAT = "/v1/chat/completions"
KEYS = {"Authorization": "Bearer key-one"}
OTHER = {"Authorization": "Bearer key-two"}


def chat_line(custom_id: str, content: str = "Hi", **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": MODEL, "messages": messages, **body},
    }


def jsonl(*lines: dict[str, Any] | str) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


async def upload(served: Served, data: bytes, purpose: str = "batch", headers: dict[str, str] | None = None) -> Any:
    form = aiohttp.FormData()
    form.add_field("purpose", purpose)
    form.add_field("file", data, filename="input.jsonl", content_type="application/jsonl")
    async with served.client.post("/v1/files", data=form, headers=headers or KEYS) as response:
        return response.status, await response.json()


async def call(served: Served, method: str, path: str, *, headers: dict[str, str] | None = None, **kw: Any) -> Any:
    async with served.client.request(method, path, headers=headers or KEYS, **kw) as response:
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, await response.read()


async def run_batch(served: Served, data: bytes, endpoint: str = CHAT) -> dict[str, Any]:
    status, file = await upload(served, data)
    assert status == 200, file
    status, batch = await call(
        served,
        "POST",
        "/v1/batches",
        json={"input_file_id": file["id"], "endpoint": endpoint, "completion_window": "24h"},
    )
    assert status == 200 and batch["status"] == "validating", batch
    last: list[dict[str, Any]] = []

    async def poll() -> None:
        last.append((await call(served, "GET", f"/v1/batches/{batch['id']}"))[1])

    async def finished() -> bool:
        await poll()
        return last[-1]["status"] in ("completed", "failed", "expired", "cancelled")

    for _ in range(1000):  # polled as a client would, 10 ms apart (at most 10 s)
        if await finished():
            return last[-1]
        await asyncio.sleep(0.01)
    raise AssertionError(last[-1])


@pytest.fixture
async def served(serve: Any) -> Served:
    return await serve(fast_model(reply("Hello", " there", "!")), api_key=["key-one", "key-two"])


async def test_a_chat_batch_answers_each_line_as_the_interactive_request_would(served: Served) -> None:
    lines = [chat_line(f"req-{n}", f"question {n}") for n in range(20)]
    batch = await run_batch(served, jsonl(*lines))
    assert batch["status"] == "completed", batch
    assert batch["request_counts"] == {"total": 20, "completed": 20, "failed": 0}
    assert batch["model"] == MODEL and batch["error_file_id"] is None
    status, content = await call(served, "GET", f"/v1/files/{batch['output_file_id']}/content")
    assert status == 200
    output = [json.loads(line) for line in content.decode().splitlines()]
    assert sorted(line["custom_id"] for line in output) == sorted(line["custom_id"] for line in lines)
    status, interactive = await call(served, "POST", "/v1/chat/completions", json=lines[0]["body"])
    assert status == 200
    (first,) = [line for line in output if line["custom_id"] == "req-0"]
    assert first["response"]["status_code"] == 200 and first["error"] is None
    answered = first["response"]["body"]
    assert answered["choices"] == interactive["choices"] and answered["usage"] == interactive["usage"]
    status, listed = await call(served, "GET", "/v1/batches?limit=1")
    assert listed["data"][0]["id"] == batch["id"] and listed["object"] == "list"
    _, scraped = await call(served, "GET", "/metrics")
    samples = scraped.decode()
    assert f'ovserve_batch_requests_total{{model="{MODEL}",outcome="completed"}} 20.0' in samples
    assert f'ovserve_batch_requests_pending{{model="{MODEL}"}} 0.0' in samples
    assert "ovserve_files_store_failures_total 0.0" in samples


async def test_a_line_that_fails_goes_to_the_error_file_with_its_status(served: Served) -> None:
    batch = await run_batch(served, jsonl(chat_line("ok"), chat_line("too-long", max_tokens=10**9)))
    assert batch["status"] == "completed" and batch["request_counts"]["failed"] == 1
    _, content = await call(served, "GET", f"/v1/files/{batch['error_file_id']}/content")
    (error,) = [json.loads(line) for line in content.decode().splitlines()]
    assert error["custom_id"] == "too-long" and error["response"]["status_code"] == 400
    assert set(error["response"]["body"]["error"]) == {"message", "type", "param", "code"}


async def test_a_bad_input_file_fails_with_line_numbers_and_runs_nothing(served: Served) -> None:
    data = jsonl(chat_line("a"), "{not json", chat_line("a"), {**chat_line("b"), "url": "/v1/embeddings"})
    batch = await run_batch(served, data)
    assert batch["status"] == "failed" and batch["failed_at"] is not None
    assert [(error["line"], error["code"]) for error in batch["errors"]["data"]] == [
        (2, "invalid_json_line"),
        (3, "duplicate_custom_id"),
        (4, "mismatched_endpoint"),
    ]
    assert batch["request_counts"] == {"total": 4, "completed": 0, "failed": 0}
    assert batch["output_file_id"] is None and batch["error_file_id"] is None


async def test_files_and_batches_are_private_to_their_key(served: Served) -> None:
    status, file = await upload(served, jsonl(chat_line("a")))
    assert status == 200 and file["object"] == "file" and file["purpose"] == "batch" and file["id"].startswith("file-")
    assert file["bytes"] == len(jsonl(chat_line("a"))) and file["filename"] == "input.jsonl"
    for method, path in (("GET", f"/v1/files/{file['id']}"), ("GET", f"/v1/files/{file['id']}/content")):
        assert (await call(served, method, path, headers=OTHER))[0] == 404
    assert (await call(served, "GET", "/v1/files", headers=OTHER))[1]["data"] == []
    create = {"input_file_id": file["id"], "endpoint": CHAT, "completion_window": "24h"}
    assert (await call(served, "POST", "/v1/batches", headers=OTHER, json=create))[0] == 404
    status, batch = await call(served, "POST", "/v1/batches", json=create)
    assert (await call(served, "GET", f"/v1/batches/{batch['id']}", headers=OTHER))[0] == 404
    assert (await call(served, "POST", f"/v1/batches/{batch['id']}/cancel", headers=OTHER))[0] == 404
    status, listed = await call(served, "GET", "/v1/files")
    assert [one["id"] for one in listed["data"]] == [file["id"]] and listed["has_more"] is False
    assert (await call(served, "DELETE", f"/v1/files/{file['id']}", headers=OTHER))[0] == 404
    status, deleted = await call(served, "DELETE", f"/v1/files/{file['id']}")
    assert (status, deleted) == (200, {"id": file["id"], "object": "file", "deleted": True})


async def test_the_file_list_pages_with_after_and_limit(served: Served) -> None:
    ids = [(await upload(served, b"x\n", purpose="user_data"))[1]["id"] for _ in range(3)]
    _, first = await call(served, "GET", "/v1/files?limit=2&order=asc")
    assert [one["id"] for one in first["data"]] == ids[:2] and first["has_more"] is True
    _, rest = await call(served, "GET", f"/v1/files?limit=2&order=asc&after={first['last_id']}")
    assert [one["id"] for one in rest["data"]] == ids[2:] and rest["has_more"] is False
    _, newest = await call(served, "GET", "/v1/files?limit=1")
    assert newest["data"][0]["id"] == ids[-1]


_CREATE = {"endpoint": CHAT, "completion_window": "24h"}
_ANCHOR, _SECONDS = "expires_after[anchor]", "expires_after[seconds]"
_JSON_HEADERS = {**KEYS, "Content-Type": "application/json"}


def _form_without_file() -> aiohttp.FormData:
    return aiohttp.FormData({"purpose": "batch"}, default_to_multipart=True)


def _expiring(**fields: str) -> dict[str, Any]:
    """An upload with OpenAI's expires_after[...] fields."""
    form = aiohttp.FormData({"purpose": "batch", **fields}, default_to_multipart=True)
    form.add_field("file", b"x\n", filename="input.jsonl")
    return {"data": form}


def _batch(**fields: Any) -> dict[str, Any]:
    return {"json": {**_CREATE, "input_file_id": "f", **fields}}


_EXPIRY_60S = {"anchor": "created_at", "seconds": 60}
_EXPIRY_ANCHOR = {"anchor": "completed_at", "seconds": 3600}
HOSTILE: list[tuple[str, str, str, dict[str, Any], int]] = [
    ("files: JSON instead of a form", "POST", "/v1/files", {"json": {"purpose": "batch"}}, 415),
    ("files: no file part", "POST", "/v1/files", {"data": _form_without_file()}, 400),
    ("files: unknown id", "GET", "/v1/files/file-nope", {}, 404),
    ("files: unknown content", "GET", "/v1/files/file-nope/content", {}, 404),
    ("files: delete unknown", "DELETE", "/v1/files/file-nope", {}, 404),
    ("files: limit 0", "GET", "/v1/files?limit=0", {}, 400),
    ("files: bad order", "GET", "/v1/files?order=sideways", {}, 400),
    ("files: bad purpose filter", "GET", "/v1/files?purpose=weights", {}, 400),
    ("files: expiry under an hour", "POST", "/v1/files", _expiring(**{_ANCHOR: "created_at", _SECONDS: "60"}), 400),
    ("files: expiry past 30 days", "POST", "/v1/files", _expiring(**{_ANCHOR: "created_at", _SECONDS: "2592001"}), 400),
    ("files: expiry anchor", "POST", "/v1/files", _expiring(**{_ANCHOR: "last_active_at", _SECONDS: "3600"}), 400),
    ("files: expiry seconds alone", "POST", "/v1/files", _expiring(**{_SECONDS: "3600"}), 400),
    ("batches: not JSON", "POST", "/v1/batches", {"data": b"{", "headers": _JSON_HEADERS}, 400),
    ("batches: no input file", "POST", "/v1/batches", {"json": _CREATE}, 400),
    ("batches: unknown file", "POST", "/v1/batches", _batch(input_file_id="file-nope"), 404),
    ("batches: unknown endpoint", "POST", "/v1/batches", _batch(endpoint="/v1/moderations"), 400),
    ("batches: window 48h", "POST", "/v1/batches", _batch(completion_window="48h"), 400),
    ("batches: metadata not strings", "POST", "/v1/batches", _batch(metadata={"a": 1}), 400),
    ("batches: unknown field", "POST", "/v1/batches", _batch(priority=1), 400),
    ("batches: output expiry under an hour", "POST", "/v1/batches", _batch(output_expires_after=_EXPIRY_60S), 400),
    ("batches: output expiry anchor", "POST", "/v1/batches", _batch(output_expires_after=_EXPIRY_ANCHOR), 400),
    ("batches: unknown id", "GET", "/v1/batches/batch_nope", {}, 404),
    ("batches: cancel unknown", "POST", "/v1/batches/batch_nope/cancel", {}, 404),
    ("batches: limit 101", "GET", "/v1/batches?limit=101", {}, 400),
    ("batches: no key", "GET", "/v1/batches", {"headers": {}}, 401),
]


@pytest.mark.parametrize(("case", "method", "path", "kwargs", "status"), HOSTILE, ids=[case[0] for case in HOSTILE])
async def test_hostile_requests_get_a_4xx_in_openais_shape(
    served: Served, case: str, method: str, path: str, kwargs: dict[str, Any], status: int
) -> None:
    headers = kwargs.pop("headers", KEYS)
    got, body = await call(served, method, path, headers=headers or {"X-No-Key": "1"}, **kwargs)
    assert got == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_a_file_over_the_limits_is_refused_and_leaves_nothing(serve: Any) -> None:
    served = await serve(fast_model(), max_file_mb=0.001, max_file_lines=3)
    status, body = await upload(served, b"x" * 2000, headers={})
    assert (status, body["error"]["code"]) == (413, "payload_too_large")
    status, body = await upload(served, b"a\nb\nc\nd", headers={})
    assert (status, body["error"]["code"]) == (400, "too_many_lines")
    status, body = await upload(served, b"", headers={})
    assert (status, body["error"]["code"]) == (400, "empty_file")
    status, body = await upload(served, b"a\n", purpose="fine-tune", headers={})
    assert (status, body["error"]["param"]) == (400, "purpose")
    assert (await call(served, "GET", "/v1/files", headers={"X-Open": "1"}))[1]["data"] == []
    status, ok = await upload(served, b"a\nb\nc", headers={})
    assert status == 200 and ok["bytes"] == 5


async def test_an_upload_with_expires_after_tells_when_it_expires(served: Served) -> None:
    status, file = await call(served, "POST", "/v1/files", **_expiring(**{_ANCHOR: "created_at", _SECONDS: "3600"}))
    assert status == 200 and file["expires_at"] == file["created_at"] + 3600
    assert (await call(served, "GET", f"/v1/files/{file['id']}"))[1] == file
    status, plain = await upload(served, b"x\n")
    assert status == 200 and "expires_at" not in plain


async def test_output_expires_after_makes_the_output_and_error_files_expire(served: Served) -> None:
    """OpenAI's ``output_expires_after``: each file the batch makes expires ``seconds`` after it is
    made; the batch object itself does not show the field (OpenAI's has none)."""
    status, file = await upload(served, jsonl(chat_line("ok"), chat_line("bad", max_tokens=-1)))
    expiry = {"anchor": "created_at", "seconds": 7200}
    create = {"input_file_id": file["id"], "endpoint": CHAT, "completion_window": "24h", "output_expires_after": expiry}
    status, batch = await call(served, "POST", "/v1/batches", json=create)
    assert status == 200 and "output_expires_after" not in batch, batch
    for _ in range(1000):
        batch = (await call(served, "GET", f"/v1/batches/{batch['id']}"))[1]
        if batch["status"] == "completed":
            break
        await asyncio.sleep(0.01)
    assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}, batch
    for file_id in (batch["output_file_id"], batch["error_file_id"]):
        made = (await call(served, "GET", f"/v1/files/{file_id}"))[1]
        assert made["expires_at"] == made["created_at"] + 7200, made


async def test_cancelling_a_finished_batch_is_a_409(served: Served) -> None:
    batch = await run_batch(served, jsonl(chat_line("a")))
    status, body = await call(served, "POST", f"/v1/batches/{batch['id']}/cancel")
    assert status == 409 and body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("/v1/completions", {"prompt": "Say hi"}),
        ("/v1/responses", {"input": "Say hi"}),
        ("/v1/embeddings", {"input": ["one", "three"]}),
    ],
)
async def test_every_batch_endpoint_answers_as_its_route_does(serve: Any, endpoint: str, body: dict[str, Any]) -> None:
    task = "embeddings" if endpoint == "/v1/embeddings" else "text_generation"
    served = await serve(fast_model(reply("Hello", "!"), task=task))
    line = {"custom_id": "only", "method": "POST", "url": endpoint, "body": {"model": MODEL, **body}}
    batch = await run_batch(served, jsonl(line), endpoint)
    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 1, batch
    _, content = await call(served, "GET", f"/v1/files/{batch['output_file_id']}/content", headers={"X": "open"})
    (answered,) = [json.loads(text)["response"]["body"] for text in content.decode().splitlines()]
    _, interactive = await call(served, "POST", endpoint, json=line["body"], headers={"X": "open"})
    if endpoint == "/v1/embeddings":
        assert answered["data"] == interactive["data"]
    elif endpoint == "/v1/responses":
        assert answered["output"][0]["content"] == interactive["output"][0]["content"]
    else:
        assert answered["choices"] == interactive["choices"]


async def test_batch_requests_in_the_engine_show_in_their_own_gauge_not_the_interactive_queue(serve: Any) -> None:
    """A router weighing replicas sees a batch's load (``ovserve_batch_requests_admitted``) while
    the interactive gauges it routes by stay at zero: the batch never queues interactive requests."""
    release = threading.Event()
    fast = fast_model(held_after_first_token(release))
    served = await serve(fast, api_key=["key-one"])
    running = asyncio.create_task(run_batch(served, jsonl(chat_line("a"), chat_line("b"))))
    await eventually(lambda: fast.model.admission.batch == 2)
    busy = await samples(served, headers=KEYS)
    assert busy[("ovserve_batch_requests_admitted", of(MODEL))] == 2
    assert busy[("ovserve_requests_waiting", of(MODEL))] == busy[("ovserve_requests_running", of(MODEL))] == 0
    release.set()
    assert (await running)["request_counts"]["completed"] == 2
    assert (await samples(served, headers=KEYS))[("ovserve_batch_requests_admitted", of(MODEL))] == 0
