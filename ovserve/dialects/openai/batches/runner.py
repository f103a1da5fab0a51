"""The batch runner: each batch from ``validating`` to a final status, its lines as requests.

A batch goes ``validating`` (every line checked: ``lines.check_input``; any problem, or a model
that is not served, makes it ``failed`` with the line numbers in ``errors``) -> ``in_progress``
(its lines run) -> ``finalizing`` (its output and error files recorded) -> ``completed``; a cancel
makes it ``cancelling`` -> ``cancelled``, its ``completion_window`` running out ``expired`` (the
lines not run are written to the error file with the code ``batch_expired``).

Each line is one request answered by :data:`Answerer` -- the request envelope's
``answer_body`` (``ovserve.api.batches``): the same parsing, preparation, admission, engine lease,
``--request_timeout`` and metrics as an interactive request -- once the batch's model has a free
batch slot (``share.BatchShare``: the batches' share of the engine). A line is written to the
output file (a 2xx) or the error file (anything else) as soon as it finishes, and flushed, before
its slot is given back; the batch's counts follow. Lines finish in any order. A 503 (the model is
loading, restarting or draining) is not a result: the line is tried again, with growing delays,
until its batch's window ends.

Durability: the Batch object is written to the store at every change; on start, every batch with
work left is resumed (:meth:`BatchRunner.start`), skipping the ``custom_id`` its output and error
files already hold, so no line is answered twice and none is lost. A server that stops (SIGTERM,
drain) cancels the lines in flight without recording them: they run again after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, Protocol

from ovserve.dialects.openai.batches import lines
from ovserve.dialects.openai.batches.objects import (
    FINISHED,
    WINDOW_S,
    Batch,
    BatchError,
    BatchErrors,
    CreateBatchRequest,
    InputLine,
    RequestCounts,
)
from ovserve.dialects.openai.batches.share import BatchShare, ModelShare
from ovserve.dialects.openai.batches.store import BatchStore
from ovserve.dialects.openai.files.store import FileStore, new_file_id
from ovserve.errors import BadRequestError, ConflictError, OvserveError
from ovserve.json_types import JsonObject
from ovserve.models.served import ModelRegistry

log = logging.getLogger(__name__)

# (endpoint, body, owner) -> (HTTP status, JSON body): a failed request is its status and error
# body, never an exception (only cancellation propagates).
Answerer = Callable[[str, JsonObject, str], Awaitable[tuple[int, JsonObject]]]

OUTPUT, ERRORS = "output.jsonl", "errors.jsonl"


class BatchMetrics(Protocol):
    """What ``/metrics`` counts of batches (``ovserve.metrics.ServerMetrics``)."""

    def batch_queued(self, model: str, count: int) -> None: ...
    def batch_line(self, model: str, outcome: str) -> None: ...


class _NoMetrics:
    def batch_queued(self, model: str, count: int) -> None:
        pass

    def batch_line(self, model: str, outcome: str) -> None:
        pass


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex[:24]}"


class _Run:
    """One batch being run: its object, owner, files and the lines in flight."""

    def __init__(self, batch: Batch, owner: str, work: Path) -> None:
        self.batch = batch
        self.owner = owner
        self.work = work
        self.cancelled = False
        self.in_flight: set[asyncio.Task[None]] = set()
        self.task: asyncio.Task[None] | None = None

    def count(self, *, completed: int = 0, failed: int = 0) -> None:
        counts = self.batch.request_counts
        self.update(
            request_counts=RequestCounts(
                total=counts.total, completed=counts.completed + completed, failed=counts.failed + failed
            )
        )

    def update(self, **fields: Any) -> None:
        self.batch = self.batch.model_copy(update=fields)


class BatchRunner:
    """Every batch of the server (see the module doc); ``now`` is Unix time (tests move their own)."""

    def __init__(
        self,
        store: BatchStore,
        share: BatchShare,
        models: ModelRegistry,
        answer: Answerer,
        *,
        metrics: BatchMetrics | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.files: FileStore = store.files
        self.share = share
        self.models = models
        self.answer = answer
        self.now = now
        self.metrics: BatchMetrics = metrics if metrics is not None else _NoMetrics()
        self._runs: dict[str, _Run] = {}

    def _time(self) -> int:
        return int(self.now())

    # -- the API's side ---------------------------------------------------------------------

    async def start(self) -> None:
        """Resume every batch with work left (after a restart, or a crash)."""
        await self.store.start()
        for owner, batch in await self.store.unfinished():
            log.info("batch %s: resuming (%s)", batch.id, batch.status)
            self._launch(batch, owner)

    async def create(self, request: CreateBatchRequest, *, owner: str) -> Batch:
        """A new batch on one of ``owner``'s files (404 if unknown, 400 if not for ``batch``)."""
        source = await self.files.get(request.input_file_id, owner=owner)
        if source.purpose != "batch":
            raise BadRequestError(
                f"the file {source.id} was uploaded for '{source.purpose}', not 'batch'", param="input_file_id"
            )
        created = self._time()
        batch = Batch(
            id=new_batch_id(),
            object="batch",
            endpoint=request.endpoint,
            input_file_id=request.input_file_id,
            completion_window=request.completion_window,
            status="validating",
            created_at=created,
            expires_at=created + WINDOW_S[request.completion_window],
            request_counts=RequestCounts(total=0, completed=0, failed=0),
            metadata=request.metadata,
        )
        await self.store.put(batch, owner=owner)
        return self._launch(batch, owner).batch

    async def get(self, batch_id: str, *, owner: str) -> Batch:
        return self.current(await self.store.get(batch_id, owner=owner))

    def current(self, stored: Batch) -> Batch:
        """``stored`` as it is now: a running batch's live counts and status."""
        run = self._runs.get(stored.id)
        return run.batch if run is not None else stored

    async def cancel(self, batch_id: str, *, owner: str) -> Batch:
        """Stop a batch: ``cancelling`` at once, ``cancelled`` once its lines in flight stopped
        (their results so far are kept); 409 for a batch already finished."""
        batch = await self.get(batch_id, owner=owner)
        run = self._runs.get(batch_id)
        if batch.status in FINISHED or run is None:
            raise ConflictError(
                f"the batch {batch_id} is {batch.status}: it cannot be cancelled", code="batch_finished"
            )
        if not run.cancelled:
            run.cancelled = True
            run.update(status="cancelling", cancelling_at=self._time())
            await self.store.put(run.batch, owner=owner)
            for task in run.in_flight:
                task.cancel()
        return run.batch

    async def aclose(self) -> None:
        """Stop running; a batch's state stays as it is, for the next start to resume."""
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- running a batch --------------------------------------------------------------------

    def _launch(self, batch: Batch, owner: str) -> _Run:
        run = _Run(batch, owner, self.store.work_dir(batch.id))
        run.cancelled = batch.status == "cancelling"
        self._runs[batch.id] = run
        run.task = asyncio.create_task(self._run(run), name=f"batch-{batch.id}")
        return run

    async def _run(self, run: _Run) -> None:
        try:
            if run.batch.status == "validating":
                await self._validate(run)
            if run.batch.status == "in_progress":
                await self._execute(run)
            if run.batch.status in ("finalizing", "cancelling"):
                await self._finalize(run)
        except asyncio.CancelledError:
            raise  # the server stops: the batch resumes at the next start
        except Exception as exc:  # a fault of the disk or a bug: the batch fails, the server goes on
            log.exception("batch %s failed", run.batch.id)
            error = BatchError(code="internal_error", message=f"the batch failed on the server: {type(exc).__name__}")
            run.update(status="failed", failed_at=self._time(), errors=BatchErrors(data=[error]))
            with contextlib.suppress(Exception):
                await self.store.put(run.batch, owner=run.owner)
        finally:
            self._runs.pop(run.batch.id, None)

    async def _input(self, run: _Run) -> Path:
        return await self.files.path(run.batch.input_file_id, owner=run.owner)

    async def _validate(self, run: _Run) -> None:
        try:
            path = await self._input(run)
        except OvserveError:
            checked = lines.Checked()
            checked.add(1, "invalid_file", f"the input file {run.batch.input_file_id} no longer exists")
        else:
            checked = await asyncio.to_thread(lines.check_input, path, run.batch.endpoint)
        if not checked.errors and checked.model is not None and not self._served(checked.model):
            checked.add(1, "model_not_found", f"The model '{checked.model}' is not served here.", "body.model")
        counts = RequestCounts(total=checked.total, completed=0, failed=0)
        if run.cancelled:  # cancelled while it was being checked: nothing runs
            run.update(request_counts=counts)
        elif checked.errors:
            errors = BatchErrors(data=checked.errors)
            run.update(status="failed", failed_at=self._time(), errors=errors, request_counts=counts)
        else:
            run.update(status="in_progress", in_progress_at=self._time(), model=checked.model, request_counts=counts)
        await self.store.put(run.batch, owner=run.owner)

    def _served(self, model: str) -> bool:
        try:
            self.models.get(model)
        except OvserveError:
            return False
        return True

    async def _execute(self, run: _Run) -> None:
        path = await self._input(run)
        run.work.mkdir(parents=True, exist_ok=True)
        done_ok = await asyncio.to_thread(lines.recorded_ids, run.work / OUTPUT)
        done_failed = await asyncio.to_thread(lines.recorded_ids, run.work / ERRORS)
        total = run.batch.request_counts.total
        run.update(request_counts=RequestCounts(total=total, completed=len(done_ok), failed=len(done_failed)))
        done = done_ok | done_failed
        model = run.batch.model
        assert model is not None  # set by validation
        queued = max(0, total - len(done))
        self.metrics.batch_queued(model, queued)
        counted = run.batch.request_counts.completed + run.batch.request_counts.failed
        with (
            (run.work / OUTPUT).open("a", encoding="utf-8") as output,
            (run.work / ERRORS).open("a", encoding="utf-8") as errors,
        ):
            left: list[InputLine] = []
            try:
                left = await self._launch_lines(run, model, path, done, output, errors)
                await asyncio.gather(*run.in_flight, return_exceptions=True)
            finally:  # the server stops (or a fault): the lines in flight stop unrecorded
                for task in run.in_flight:
                    task.cancel()
                await asyncio.gather(*run.in_flight, return_exceptions=True)
                # Lines that will not run now leave the pending count (expired ones are counted below).
                finished = run.batch.request_counts.completed + run.batch.request_counts.failed - counted
                expiring = 0 if run.cancelled else len(left)
                self.metrics.batch_queued(model, finished + expiring - queued)
            if not run.cancelled and left:  # the window ran out: the rest are expired
                for line in left:
                    errors.write(lines.error_line(line.custom_id, "batch_expired", _EXPIRED))
                    self.metrics.batch_line(model, "expired")
                errors.flush()
                run.count(failed=len(left))
                run.update(expired_at=self._time())
        if not run.cancelled:
            run.update(status="finalizing", finalizing_at=self._time())
        await self.store.put(run.batch, owner=run.owner)

    async def _launch_lines(
        self, run: _Run, model: str, path: Path, done: set[str], output: IO[str], errors: IO[str]
    ) -> list[InputLine]:
        """Start every line not done yet, each once it has a batch slot; the lines left unstarted
        (the batch was cancelled, or its window ran out)."""
        expires_at = run.batch.expires_at or float("inf")
        left: list[InputLine] = []
        for line in lines.read_input(path):
            if line.custom_id in done:
                continue
            if not (run.cancelled or self.now() >= expires_at):
                try:
                    async with asyncio.timeout(max(0.0, expires_at - self.now())):
                        slot = await self.share.acquire(model)
                except TimeoutError:
                    pass
                else:
                    if not (run.cancelled or self.now() >= expires_at):  # it may have waited long
                        task = asyncio.create_task(self._line(run, model, slot, line, output, errors))
                        run.in_flight.add(task)
                        task.add_done_callback(run.in_flight.discard)
                        continue
                    self.share.release(slot)
            left.append(line)
        return left

    async def _line(
        self, run: _Run, model: str, slot: ModelShare, line: InputLine, output: IO[str], errors: IO[str]
    ) -> None:
        try:
            status, body = await self.answer(run.batch.endpoint, line.body, run.owner)
            delay = _RETRY_S
            while status == 503 and self.now() < (run.batch.expires_at or float("inf")):
                # The model is loading (a restart resumes batches before its engine is up), restarting
                # or draining: a batch waits for it instead of failing the line.
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
                status, body = await self.answer(run.batch.endpoint, line.body, run.owner)
            ok = 200 <= status < 300
            target = output if ok else errors
            target.write(lines.output_line(line.custom_id, status, body))
            target.flush()  # recorded before the slot goes back: a crash from here on keeps it
            run.count(completed=int(ok), failed=int(not ok))
            self.metrics.batch_line(model, "completed" if ok else "failed")
        finally:
            self.share.release(slot)
        await self.store.put(run.batch, owner=run.owner)

    async def _finalize(self, run: _Run) -> None:
        batch, work = run.batch, run.work
        if batch.output_file_id is None and batch.error_file_id is None:
            # File ids chosen and written down before the files move: a crash in between is finished
            # by the next start (adopt is idempotent) instead of losing the results.
            ids: dict[str, str | None] = {"output_file_id": None, "error_file_id": None}
            for name, key in ((OUTPUT, "output_file_id"), (ERRORS, "error_file_id")):
                if (work / name).exists() and (work / name).stat().st_size > 0:
                    ids[key] = new_file_id()
            run.update(**ids)
            await self.store.put(run.batch, owner=run.owner)
        batch = run.batch
        for name, file_id in ((OUTPUT, batch.output_file_id), (ERRORS, batch.error_file_id)):
            if file_id is not None:
                filename = f"{batch.id}_{name.removesuffix('.jsonl')}.jsonl"
                await self.files.run(self.files.adopt, work / name, file_id, run.owner, filename, "batch_output")
        now = self._time()
        if batch.status == "cancelling":
            run.update(status="cancelled", cancelled_at=now)
        elif batch.expired_at is not None:
            run.update(status="expired")
        else:
            run.update(status="completed", completed_at=now)
        await self.store.put(run.batch, owner=run.owner)
        await asyncio.to_thread(shutil.rmtree, work, True)
        log.info("batch %s: %s (%s)", batch.id, run.batch.status, run.batch.request_counts.encode())


# A batch request answered 503 (its model not ready) is tried again after these many seconds, doubling.
_RETRY_S, _RETRY_MAX_S = 0.5, 10.0
_EXPIRED = "This request could not be executed before the completion window expired."
