"""The batch runner over a real files store and a stand-in answerer: a batch resumes after a stop
without answering a line twice or losing one, expires past its window, and fails validation
without running anything."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from ovserve.dialects.openai.batches.objects import Batch, CreateBatchRequest
from ovserve.dialects.openai.batches.runner import OUTPUT, BatchRunner
from ovserve.dialects.openai.batches.share import BatchShare
from ovserve.dialects.openai.batches.store import BatchStore
from ovserve.dialects.openai.files.objects import ListQuery
from ovserve.dialects.openai.files.store import FileStore
from ovserve.errors import ModelNotFoundError, ServiceUnavailableError
from ovserve.json_types import JsonObject
from ovserve.models.admission import Admission
from tests.fast.harness import eventually
from tests.unit.test_batch_share import _Models

OWNER = "owner-digest"
CHAT = "/v1/chat/completions"


class Answers:
    """Answers each line with its custom_id echoed; lines listed in ``held`` wait until released."""

    def __init__(self, held: set[str] | None = None) -> None:
        self.seen: list[str] = []
        self.held = held or set()
        self.release = asyncio.Event()

    async def __call__(self, endpoint: str, body: JsonObject, owner: str) -> tuple[int, JsonObject]:
        tag = str(body["messages"])
        self.seen.append(tag)
        if tag in self.held:
            await self.release.wait()
        if tag == "bad":
            return 400, {"error": {"message": "no", "type": "invalid_request_error", "param": None, "code": None}}
        return 200, {"echo": tag}


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[FileStore]:
    store = FileStore(tmp_path / "files", max_bytes=1 << 20, max_lines=1000)
    await store.start()
    yield store
    await store.aclose()


def runner(
    files: FileStore, answers: Answers, *, now: Callable[[], float] | None = None, alone: int = 2
) -> BatchRunner:
    share = BatchShare(_Models(Admission("m", max_waiting=4)), alone=alone, shared=1)  # type: ignore[arg-type]
    extra: dict[str, Any] = {"now": now} if now is not None else {}
    return BatchRunner(BatchStore(files), share, _Models(Admission("m", 4)), answers, **extra)  # type: ignore[arg-type]


async def upload(files: FileStore, ids: list[str], *, model: str = "m") -> str:
    upload = files.upload(OWNER, "input.jsonl")
    for custom_id in ids:
        line = {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {"model": model, "messages": custom_id}}
        await upload.write((json.dumps(line) + "\n").encode())
    return (await upload.finish("batch")).id


async def finished(batches: BatchRunner, batch_id: str) -> Batch:
    async def status() -> str:
        return (await batches.get(batch_id, owner=OWNER)).status

    states: list[str] = []

    def done() -> bool:
        return bool(states) and states[-1] in ("completed", "failed", "expired", "cancelled")

    for _ in range(500):
        states.append(await status())
        if done():
            break
        await asyncio.sleep(0.01)
    assert done(), states
    return await batches.get(batch_id, owner=OWNER)


async def content(files: FileStore, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    path = await files.path(file_id, owner=OWNER)
    return [json.loads(line) for line in path.read_text().splitlines()]


def create(file_id: str) -> CreateBatchRequest:
    return CreateBatchRequest(input_file_id=file_id, endpoint=CHAT, completion_window="24h")


async def test_a_stopped_batch_resumes_without_answering_a_line_twice(files: FileStore) -> None:
    ids = [f"line-{n}" for n in range(10)]
    file_id = await upload(files, ids)
    first = Answers(held={"line-4", "line-5"})
    batches = runner(files, first)
    await batches.start()
    batch = await batches.create(create(file_id), owner=OWNER)
    # Lines 0-3 answered and recorded; 4 and 5 in the engine (both slots) when the server stops.
    await eventually(lambda: len(first.seen) == 6)
    work = batches.store.work_dir(batch.id)
    await batches.aclose()
    with (work / OUTPUT).open("a") as output:
        output.write('{"id": "batch_req_cut", "custom_id": "line-')  # a crash in the middle of a write

    second = Answers()
    resumed = runner(files, second)
    await resumed.start()
    done = await finished(resumed, batch.id)
    await resumed.aclose()
    assert done.status == "completed"
    assert sorted(second.seen) == [f"line-{n}" for n in range(4, 10)]  # nothing answered twice
    lines = await content(files, done.output_file_id)
    assert sorted(line["custom_id"] for line in lines) == sorted(ids)  # each exactly once
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (10, 10, 0)
    assert done.error_file_id is None and not work.exists()


async def test_failed_requests_go_to_the_error_file(files: FileStore) -> None:
    batches = runner(files, Answers())
    await batches.start()
    batch = await batches.create(create(await upload(files, ["ok", "bad"])), owner=OWNER)
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    (error,) = await content(files, done.error_file_id)
    assert error["custom_id"] == "bad" and error["response"]["status_code"] == 400


async def test_an_unserved_model_fails_validation_and_nothing_runs(files: FileStore) -> None:
    answers = Answers()
    batches = runner(files, answers)
    batches.models = _NoModels()  # type: ignore[assignment]
    await batches.start()
    batch = await batches.create(create(await upload(files, ["a"])), owner=OWNER)
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "failed" and done.errors is not None
    assert [error.code for error in done.errors.data] == ["model_not_found"] and answers.seen == []


class _NoModels:
    def get(self, name: str) -> None:
        raise ModelNotFoundError(f"no model '{name}'")


async def test_a_batch_past_its_window_expires_its_remaining_lines(files: FileStore) -> None:
    clock = [1_700_000_000.0]
    answers = Answers(held={"a"})
    batches = runner(files, answers, now=lambda: clock[0], alone=1)
    await batches.start()
    batch = await batches.create(create(await upload(files, ["a", "b", "c", "d"])), owner=OWNER)
    await eventually(lambda: answers.seen[:1] == ["a"])
    clock[0] += 25 * 3600  # the 24 h window is over while "a" runs
    answers.release.set()
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "expired" and done.expired_at is not None
    expired = [line for line in await content(files, done.error_file_id) if line["error"]]
    answered = len(answers.seen)
    assert {line["error"]["code"] for line in expired} == {"batch_expired"}
    assert len(expired) + answered == 4 and done.request_counts.failed == len(expired)


async def test_cancel_stops_the_lines_in_flight_and_keeps_what_finished(files: FileStore) -> None:
    answers = Answers(held={"c", "d"})
    batches = runner(files, answers)
    await batches.start()
    batch = await batches.create(create(await upload(files, ["a", "b", "c", "d", "e"])), owner=OWNER)
    await eventually(lambda: {"c", "d"} <= set(answers.seen))
    cancelling = await batches.cancel(batch.id, owner=OWNER)
    assert cancelling.status == "cancelling"
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert sorted(line["custom_id"] for line in await content(files, done.output_file_id)) == ["a", "b"]
    assert "e" not in answers.seen


async def test_a_model_not_ready_is_waited_for_not_recorded_as_a_failure(files: FileStore) -> None:
    class LoadingFirst(Answers):
        async def __call__(self, endpoint: str, body: JsonObject, owner: str) -> tuple[int, JsonObject]:
            if not self.seen:  # the first answer: the model is still loading after a restart
                self.seen.append("503")
                return 503, {
                    "error": {"message": "loading", "type": "service_unavailable", "param": None, "code": None}
                }
            return await super().__call__(endpoint, body, owner)

    answers = LoadingFirst()
    batches = runner(files, answers, alone=1)
    await batches.start()
    batch = await batches.create(create(await upload(files, ["a", "b"])), owner=OWNER)
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (2, 0)
    assert answers.seen == ["503", "a", "b"]


async def test_a_disk_fault_of_the_files_store_is_a_503_and_leaves_no_file(files: FileStore) -> None:
    shutil.rmtree(files.data)
    files.data.write_text("not a directory any more")  # every write under data/ now fails
    upload = files.upload(OWNER, "input.jsonl")
    with pytest.raises(ServiceUnavailableError) as refused:
        await upload.write(b"line\n")
    assert refused.value.status == 503 and refused.value.code == "files_store_unavailable"
    assert (await files.list(ListQuery(), owner=OWNER)) == ([], False)


async def test_a_running_batch_shrinks_to_its_shared_slots_while_an_interactive_request_runs(
    files: FileStore,
) -> None:
    admission = Admission("m", max_waiting=4)
    gates: dict[str, asyncio.Event] = {}

    async def answer(endpoint: str, body: JsonObject, owner: str) -> tuple[int, JsonObject]:
        gate = gates.setdefault(str(body["messages"]), asyncio.Event())
        await gate.wait()
        return 200, {}

    share = BatchShare(_Models(admission), alone=3, shared=1)  # type: ignore[arg-type]
    batches = BatchRunner(BatchStore(files), share, _Models(admission), answer)  # type: ignore[arg-type]
    await batches.start()
    batch = await batches.create(create(await upload(files, [f"l{n}" for n in range(8)])), owner=OWNER)
    await eventually(lambda: len(gates) == 3)  # alone, the batch fills its three slots
    interactive = admission.admit(10)  # an interactive request arrives
    for name in ("l0", "l1"):
        gates[name].set()
    await eventually(lambda: share.limit("m") == 1 and share.taken("m") == 1)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sorted(gates) == ["l0", "l1", "l2"]  # no new batch request while the interactive one runs
    interactive.release()
    await eventually(lambda: len(gates) == 5)  # back to three at once
    for name in [f"l{n}" for n in range(8)]:
        gates.setdefault(name, asyncio.Event()).set()
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "completed" and done.request_counts.completed == 8
