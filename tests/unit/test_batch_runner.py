"""The batch runner over a real files store and a stand-in answerer: a batch resumes after a stop
without answering a line twice or losing one, expires past its window, and fails validation
without running anything. Every test runs on both metadata backends (``database``: SQLite in the
files directory, and a new database on a real PostgreSQL server), and so do the replicas' tests:
two runners sharing the database and the files directory never answer a line twice, and one takes
over the batches of another that died."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ovserve.dialects.openai import postgres as shared_postgres
from ovserve.dialects.openai.batches.objects import Batch, CreateBatchRequest
from ovserve.dialects.openai.batches.progress import OUTPUT, own, recorded
from ovserve.dialects.openai.batches.runner import LEASE_S, BatchRunner
from ovserve.dialects.openai.batches.share import BatchShare
from ovserve.dialects.openai.batches.store import BatchStore
from ovserve.dialects.openai.files.objects import FileObject, ListQuery
from ovserve.dialects.openai.files.records import StoreFaults
from ovserve.dialects.openai.files.store import FileStore
from ovserve.errors import ModelNotFoundError, NotFoundError, ServiceUnavailableError
from ovserve.json_types import JsonObject
from ovserve.models.admission import Admission
from tests.fast.harness import eventually
from tests.postgres import PostgresServer, _free_port
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


OpenFiles = Callable[..., Awaitable[FileStore]]


@pytest.fixture(scope="module")
def postgres_database(postgres: PostgresServer) -> str:
    """One database for the module's PostgreSQL tests (made once: a CREATE DATABASE takes 0.5 s)."""
    return postgres.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> str | None:
    """Where the metadata is: None (SQLite in the files directory), or the module's PostgreSQL
    database, emptied (a claim sees every batch in it)."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_database")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS ovserve_files, ovserve_batches, ovserve_files_schema_version")
    return url


@pytest.fixture
async def open_files(tmp_path: Path, database: str | None) -> AsyncIterator[OpenFiles]:
    """Opens a files store on the test's directory and database (each call a new one: a restart,
    or another replica sharing both; ``now``: its clock); all closed after the test."""
    opened: list[FileStore] = []

    async def open_store(**options: Any) -> FileStore:
        store = FileStore(tmp_path / "files", max_bytes=1 << 20, max_lines=1000, database=database, **options)
        await store.start()
        opened.append(store)
        return store

    yield open_store
    for store in reversed(opened):
        await store.aclose()


@pytest.fixture
async def files(open_files: OpenFiles) -> FileStore:
    return await open_files()


def runner(
    files: FileStore,
    answers: Answers,
    *,
    now: Callable[[], float] | None = None,
    alone: int = 2,
    name: str = "replica-a",
) -> BatchRunner:
    share = BatchShare(_Models(Admission("m", max_waiting=4)), alone=alone, shared=1)  # type: ignore[arg-type]
    extra: dict[str, Any] = {"now": now} if now is not None else {}
    models = _Models(Admission("m", 4))
    return BatchRunner(BatchStore(files), share, models, answers, name=name, **extra)  # type: ignore[arg-type]


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


def written(work: Path) -> int:
    """Complete lines in the output files being written (read only: ``recorded`` cuts a partial one)."""
    return sum(path.read_bytes().count(b"\n") for path in work.glob("output*.jsonl"))


def create(file_id: str, *, output_expiry_s: int | None = None) -> CreateBatchRequest:
    expiry = {"output_expires_after": {"anchor": "created_at", "seconds": output_expiry_s}} if output_expiry_s else {}
    return CreateBatchRequest.model_validate(
        {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h", **expiry}
    )


async def test_a_restarted_server_resumes_a_batch_without_answering_a_line_twice(open_files: OpenFiles) -> None:
    files = await open_files()
    ids = [f"line-{n}" for n in range(10)]
    file_id = await upload(files, ids)
    first = Answers(held={"line-4", "line-5"})
    batches = runner(files, first)
    await batches.start()
    batch = await batches.create(create(file_id, output_expiry_s=3600), owner=OWNER)
    work = batches.store.work_dir(batch.id)
    # Lines 0-3 answered and recorded; 4 and 5 in the engine (both slots) when the server stops.
    await eventually(lambda: len(first.seen) == 6 and written(work) == 4)
    await batches.aclose()
    await files.aclose()
    with own(work, OUTPUT, "replica-a").open("a") as output:
        output.write('{"id": "batch_req_cut", "custom_id": "line-')  # a crash in the middle of a write

    reopened = await open_files()  # the restart: new store objects on the same database and directory
    stored = await BatchStore(reopened).get(batch.id, owner=OWNER)
    assert stored.status == "in_progress" and stored.request_counts.completed == 4
    assert recorded(work, OUTPUT, "replica-a") == {f"line-{n}" for n in range(4)}  # its done lines
    second = Answers()
    resumed = runner(reopened, second)
    await resumed.start()
    done = await finished(resumed, batch.id)
    await resumed.aclose()
    assert done.status == "completed"
    assert sorted(second.seen) == [f"line-{n}" for n in range(4, 10)]  # nothing answered twice
    lines = await content(reopened, done.output_file_id)
    assert sorted(line["custom_id"] for line in lines) == sorted(ids)  # each exactly once
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (10, 10, 0)
    assert done.error_file_id is None and not work.exists()
    made = await reopened.get(done.output_file_id, owner=OWNER)  # output_expires_after kept over the restart
    assert made.expires_at == made.created_at + 3600


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


async def test_a_batch_cancelled_before_any_line_ran_ends_cancelled(files: FileStore) -> None:
    """Cancelled while it is validated: no line ran, so no work directory was made, and the final
    (empty) merge must not fail the batch for want of one."""
    answers = Answers()
    batches = runner(files, answers)
    await batches.start()
    batch = await batches.create(create(await upload(files, ["a", "b"])), owner=OWNER)
    cancelling = await batches.cancel(batch.id, owner=OWNER)  # before its validation ran
    assert cancelling.status == "cancelling"
    done = await finished(batches, batch.id)
    await batches.aclose()
    assert done.status == "cancelled" and done.errors is None, done
    assert (done.output_file_id, done.error_file_id, answers.seen) == (None, None, [])
    assert not batches.store.work_dir(batch.id).exists()


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


async def test_a_file_past_its_expiry_is_a_404_and_goes_with_the_next_new_file(open_files: OpenFiles) -> None:
    clock = [1_700_000_000.0]
    files = await open_files(now=lambda: clock[0])

    async def new_file(expires_after: int | None = None) -> FileObject:
        upload = files.upload(OWNER, "notes.txt")
        await upload.write(b"x\n")
        return await upload.finish("user_data", expires_after=expires_after)

    expiring, kept = await new_file(expires_after=3600), await new_file()
    assert expiring.expires_at == 1_700_003_600 and kept.expires_at is None
    clock[0] += 3600
    for read in (files.get, files.path, files.delete):
        with pytest.raises(NotFoundError):
            await read(expiring.id, owner=OWNER)
    assert [file.id for file in (await files.list(ListQuery(), owner=OWNER))[0]] == [kept.id]
    assert (files.data / expiring.id).exists()  # nothing runs in the background
    await new_file()
    assert not (files.data / expiring.id).exists() and (files.data / kept.id).exists()


async def test_a_disk_fault_of_the_files_store_is_a_503_and_leaves_no_file(files: FileStore) -> None:
    shutil.rmtree(files.data)
    files.data.write_text("not a directory any more")  # every write under data/ now fails
    upload = files.upload(OWNER, "input.jsonl")
    with pytest.raises(ServiceUnavailableError) as refused:
        await upload.write(b"line\n")
    assert refused.value.status == 503 and refused.value.code == "files_store_unavailable"
    assert (await files.list(ListQuery(), owner=OWNER)) == ([], False)
    assert files.faults.count >= 1  # ovserve_files_store_failures_total
    files.data.unlink()  # the disk is fixed: the store works again, nothing to restart
    files.data.mkdir()
    upload = files.upload(OWNER, "input.jsonl")
    await upload.write(b"line\n")
    assert (await upload.finish("batch")).bytes == 5


def test_store_faults_are_counted_each_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    """A full disk under a running batch: every fault counted, one warning a minute that says how
    many it stands for, not one per line of the batch."""
    now = [0.0]
    faults = StoreFaults(interval=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="ovserve.dialects.openai.files.store"):
        for second in range(0, 150, 10):  # a fault every 10 s for 150 s
            now[0] = float(second)
            assert faults.fault("/data", OSError(28, "No space left on device")).status == 503
    assert faults.count == 15
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 3  # at 0, 60 and 120 s
    assert "No space left on device" in warnings[0] and "(5 more since the last warning)" in warnings[1]


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


# -- replicas sharing the database and the files directory ------------------------------------
# PostgreSQL only: SQLite records are one server's own (at start it takes every batch in them).
replicas = pytest.mark.parametrize("database", ["postgresql"], indirect=True)


@replicas
async def test_two_runners_never_answer_the_same_line(open_files: OpenFiles) -> None:
    files = await open_files()
    ids = {name: [f"{name}-{n}" for n in range(6)] for name in ("x", "y", "z")}
    # Three batches left with work by a server that stopped before running any line.
    stopped = runner(files, Answers(held={line for lines in ids.values() for line in lines}))
    await stopped.start()
    created = [await stopped.create(create(await upload(files, lines)), owner=OWNER) for lines in ids.values()]
    await stopped.aclose()
    # Two replicas start at once and both look for batches to run.
    answers_a, answers_b = Answers(), Answers()
    a = runner(files, answers_a, name="replica-a")
    b = runner(await open_files(), answers_b, name="replica-b")
    await asyncio.gather(a.start(), b.start())
    await asyncio.gather(a.tend(), b.tend())
    done = [await finished(a, batch.id) for batch in created]
    await asyncio.gather(a.aclose(), b.aclose())
    assert [batch.status for batch in done] == ["completed"] * 3
    answered = answers_a.seen + answers_b.seen
    assert sorted(answered) == sorted(line for lines in ids.values() for line in lines)  # each line once
    for batch in done:
        lines = await content(files, batch.output_file_id)
        assert len(lines) == len({line["custom_id"] for line in lines}) == 6


@replicas
async def test_a_runner_takes_over_the_batch_of_one_that_stopped_renewing(open_files: OpenFiles) -> None:
    files = await open_files()
    ids = [f"line-{n}" for n in range(8)]
    stalled = Answers(held={"line-2", "line-3"})
    a = runner(files, stalled, name="replica-a")
    await a.start()
    batch = await a.create(create(await upload(files, ids)), owner=OWNER)
    work = a.store.work_dir(batch.id)
    # 0 and 1 recorded; 2 and 3 stuck in its engine
    await eventually(lambda: len(stalled.seen) == 4 and written(work) == 2)
    # Replica a stops renewing (it hangs); its lease runs out on replica b's clock.
    later = time.time() + LEASE_S + 1
    answers_b = Answers()
    b = runner(await open_files(), answers_b, name="replica-b", now=lambda: later)
    await b.start()
    done = await finished(b, batch.id)
    assert done.status == "completed"
    assert sorted(answers_b.seen) == [f"line-{n}" for n in range(2, 8)]  # not 0 and 1: they were recorded
    stalled.release.set()  # a wakes up: its lease is b's now, so it records nothing
    await eventually(lambda: batch.id not in a.running())
    await asyncio.gather(a.aclose(), b.aclose())
    lines = await content(files, done.output_file_id)
    assert sorted(line["custom_id"] for line in lines) == ids  # each exactly once
    assert (await BatchStore(files).get(batch.id, owner=OWNER)).status == "completed"


@replicas
async def test_a_cancel_asked_of_another_replica_stops_the_batch_where_it_runs(open_files: OpenFiles) -> None:
    files = await open_files()
    answers = Answers(held={"c", "d"})
    a = runner(files, answers, name="replica-a")
    b = runner(await open_files(), Answers(), name="replica-b")
    await a.start()
    await b.start()
    batch = await a.create(create(await upload(files, ["a", "b", "c", "d", "e"])), owner=OWNER)
    await eventually(lambda: {"c", "d"} <= set(answers.seen))
    cancelling = await b.cancel(batch.id, owner=OWNER)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert (await b.get(batch.id, owner=OWNER)).status == "cancelling"  # as every replica reads it
    await a.tend()  # replica a's next renewal carries the cancel out
    done = await finished(b, batch.id)
    await asyncio.gather(a.aclose(), b.aclose())
    assert done.status == "cancelled"
    assert sorted(line["custom_id"] for line in await content(files, done.output_file_id)) == ["a", "b"]
    assert "e" not in answers.seen


async def test_a_database_that_is_down_is_a_503_and_the_server_starts_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_postgres, "POOL_TIMEOUT_S", 0.3)  # the same bounded wait as the default 5 s, shorter
    down = f"postgresql://postgres:secret@127.0.0.1:{_free_port()}/postgres"  # nobody listens there
    files = FileStore(tmp_path / "files", max_bytes=1 << 20, max_lines=1000, database=down)
    await files.start()
    batches = runner(files, Answers())
    await batches.start()  # nothing to resume yet: retried at the next renewal
    upload = files.upload(OWNER, "input.jsonl")
    await upload.write(b'{"custom_id": "a"}\n')
    with pytest.raises(ServiceUnavailableError) as refused:
        await upload.finish("batch")
    assert refused.value.status == 503 and refused.value.code == "files_store_unavailable"
    assert list(files.data.iterdir()) == []  # not recorded: its bytes are gone too
    with pytest.raises(ServiceUnavailableError):
        await batches.get("batch_1", owner=OWNER)
    await batches.aclose()
    await files.aclose()
