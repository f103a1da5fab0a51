"""The batch runner: each batch from ``validating`` to a final status, its lines as requests.

A batch goes ``validating`` (every line checked: ``lines.check_input``; any problem, or a model
that is not served, makes it ``failed`` with the line numbers in ``errors``) -> ``in_progress``
(its lines run) -> ``finalizing`` (its output and error files recorded) -> ``completed``; a cancel
makes it ``cancelling`` -> ``cancelled``, its ``completion_window`` running out ``expired`` (lines not
run go to the error file as ``batch_expired``); its files expire as ``output_expires_after`` asks.

Each line is one request answered by :data:`Answerer` -- the request envelope's ``answer_body``
(``ovserve.api.batches``): the same parsing, preparation, admission, engine lease,
``--request_timeout`` and metrics as an interactive request -- once the batch's model has a free
batch slot (``share.BatchShare``: the batches' share of the engine). A line is written to this
runner's output file (a 2xx) or error file (anything else; ``progress``) as soon as it finishes,
after its counts, and flushed before its slot is given back. Lines finish in any order. A 503 (the
model is loading, restarting or draining) is not a result: the line is tried again, with growing
delays, until its batch's window ends.

Durability: the Batch object is written to the store at every change; on start, every batch with work left is
resumed (:meth:`BatchRunner.start`), skipping the ``custom_id`` its output and error files already hold, so no line
is answered twice and none is lost. A server that stops (SIGTERM, drain) cancels the lines in flight without
recording them: they run again after the restart.

Replicas: a batch runs on one runner at a time, the one holding its lease in the store (``name``;
:data:`LEASE_S`, renewed every :data:`RENEW_S` by :meth:`BatchRunner.tend`, which also takes over the
batches whose lease ran out and carries out the cancels asked of other replicas). Every write of a
running batch is fenced by the lease and made before the line's result is written: a runner that lost
its lease writes nothing more. A stop gives the leases back (docs/batch.md, "Replicas").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, Protocol

from ovserve.dialects.openai.batches import lines, progress
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
from ovserve.dialects.openai.batches.progress import ERRORS, OUTPUT
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

LEASE_S = 30.0  # how long a batch stays with a runner that stopped renewing (a dead replica)
RENEW_S = 10.0  # how often a runner renews its leases and looks for batches to take over


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
        self.lost = False  # another runner holds the lease now: stop, write nothing more
        self.answering: set[asyncio.Task[None]] = set()  # lines in flight not yet recording their result

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
        name: str = "ovserve",
    ) -> None:
        self.store = store
        self.files: FileStore = store.files
        self.share = share
        self.models = models
        self.answer = answer
        self.now = now
        self.metrics: BatchMetrics = metrics if metrics is not None else _NoMetrics()
        self.name = name
        self._runs: dict[str, _Run] = {}
        self._tending: asyncio.Task[None] | None = None
        self._resumed = False  # this runner's own batches from before a restart were taken back

    def _time(self) -> int:
        return int(self.now())

    # -- the API's side ---------------------------------------------------------------------

    async def start(self) -> None:
        """Resume every batch with work left and no other runner (after a restart, or a crash),
        then tend the leases every :data:`RENEW_S`."""
        try:
            await self._claim()
        except OvserveError as exc:  # the database is down: the server starts, the next pass resumes
            log.warning("batches: cannot resume now (%s); retrying every %g s", exc, RENEW_S)
        self._tending = asyncio.create_task(self._tend_forever(), name="batch-leases")

    async def _claim(self) -> None:
        """Take the batches whose lease is free or ran out (and, until that has worked once, this
        runner's own from before a restart) and run them."""
        now = self.now()
        mine = not self._resumed
        # Records of this server's own (SQLite): at start every lease in them is stale, whatever
        # name held it (a restart on another port has another default name).
        stale = now if self.files.records.shared or not mine else math.inf
        for owner, batch in await self.store.claim(runner=self.name, now=stale, until=now + LEASE_S, mine=mine):
            if batch.id not in self._runs:
                log.info("batch %s: %s (%s)", batch.id, "resuming" if mine else "taken over", batch.status)
                self._launch(batch, owner)
        self._resumed = True

    async def _tend_forever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self.tend()
            except OvserveError as exc:  # the store is down: the leases are renewed at the next pass
                log.warning("batches: cannot renew leases now (%s)", exc)
            except Exception:  # a bug: logged, and the leases are still tended
                log.exception("batches: tending the leases failed")

    async def tend(self) -> None:
        """Renew this runner's leases (a batch whose lease another runner took stops here), carry
        out the cancels asked of other replicas, and take the batches whose lease ran out."""
        now = self.now()
        ids = list(self._runs)
        held = await self.store.renew(ids, runner=self.name, until=now + LEASE_S)
        for batch_id in ids:
            run = self._runs.get(batch_id)
            if run is None:
                continue
            if batch_id not in held:
                log.warning("batch %s: another runner holds it now; stopped here", batch_id)
                self._lose(run)
            elif (cancel_at := held[batch_id]) is not None and not run.cancelled:
                with contextlib.suppress(_LeaseLost):
                    await self._cancel_run(run, cancel_at)
        await self._claim()

    def _lose(self, run: _Run) -> None:
        run.lost = True
        if run.task is not None:
            run.task.cancel()

    async def _save(self, run: _Run, batch: Batch | None = None) -> None:
        """Write the run's batch (or ``batch``), fenced by its lease (extended); a lost lease stops
        the run (:class:`_LeaseLost`)."""
        written = batch if batch is not None else run.batch
        if run.lost or not await self.store.put(written, runner=self.name, until=self.now() + LEASE_S):
            if not run.lost:
                log.warning("batch %s: another runner holds it now; stopped here", run.batch.id)
            self._lose(run)
            raise _LeaseLost(run.batch.id)

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
            output_expires_after=request.output_expires_after,
        )
        await self.store.add(batch, owner=owner, runner=self.name, until=self.now() + LEASE_S)
        return self._launch(batch, owner).batch

    async def get(self, batch_id: str, *, owner: str) -> Batch:
        stored = await self.store.get(batch_id, owner=owner)
        run = self._runs.get(batch_id)
        if run is not None and stored.status == "cancelling" and not run.cancelled:
            with contextlib.suppress(_LeaseLost):  # asked of another replica
                await self._cancel_run(run, stored.cancelling_at or self._time())
        return self.current(stored)

    def current(self, stored: Batch) -> Batch:
        """``stored`` as it is now: a running batch's live counts and status."""
        run = self._runs.get(stored.id)
        return run.batch if run is not None else stored

    def running(self) -> set[str]:
        """The ids of the batches this runner runs now."""
        return set(self._runs)

    async def cancel(self, batch_id: str, *, owner: str) -> Batch:
        """Stop a batch: ``cancelling`` at once, ``cancelled`` once its lines in flight stopped
        (their results so far are kept); 409 for a batch already finished. A batch this runner
        does not run is cancelled by the one that does, at its next renewal (or by the one that
        takes it over)."""
        batch = await self.get(batch_id, owner=owner)
        if batch.status not in FINISHED:
            run = self._runs.get(batch_id)
            try:
                if run is None:
                    raise _LeaseLost(batch_id)
                if not run.cancelled:
                    await self._cancel_run(run, self._time())
                batch = run.batch
            except _LeaseLost:  # another runner runs it: it cancels it when it next renews its lease
                batch = await self.store.request_cancel(batch_id, owner=owner, at=self._time())
        if batch.status in FINISHED:
            raise ConflictError(
                f"the batch {batch_id} is {batch.status}: it cannot be cancelled", code="batch_finished"
            )
        return batch

    async def _cancel_run(self, run: _Run, at: int) -> None:
        run.cancelled = True
        run.update(status="cancelling", cancelling_at=at)
        for task in run.answering:  # not those recording their result: it is kept
            task.cancel()
        await self._save(run)

    async def aclose(self) -> None:
        """Stop running, and give the leases back; a batch's state stays as it is, for the next
        start (or another replica) to resume."""
        if self._tending is not None:
            self._tending.cancel()
            await asyncio.gather(self._tending, return_exceptions=True)
        ids = list(self._runs)
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.store.release(ids, runner=self.name)
        except OvserveError as exc:  # the leases then run out by themselves
            log.warning("batches: cannot give the leases back (%s)", exc)

    # -- running a batch --------------------------------------------------------------------

    def _launch(self, batch: Batch, owner: str) -> _Run:
        run = _Run(batch, owner, self.store.work_dir(batch.id))
        run.cancelled = batch.status == "cancelling"  # also a cancel asked while no runner held it
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
        except _LeaseLost:
            pass  # another runner has the batch now: its state is that runner's to write
        except asyncio.CancelledError:
            raise  # the server stops, or the lease is lost: the batch resumes where it is
        except Exception as exc:  # a fault of the disk or a bug: the batch fails, the server goes on
            log.exception("batch %s failed", run.batch.id)
            error = BatchError(code="internal_error", message=f"the batch failed on the server: {type(exc).__name__}")
            run.update(status="failed", failed_at=self._time(), errors=BatchErrors(data=[error]))
            with contextlib.suppress(Exception):
                await self._save(run)
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
        await self._save(run)

    def _served(self, model: str) -> bool:
        try:
            self.models.get(model)
        except OvserveError:
            return False
        return True

    async def _execute(self, run: _Run) -> None:
        path = await self._input(run)
        run.work.mkdir(parents=True, exist_ok=True)
        done_ok = await asyncio.to_thread(progress.recorded, run.work, OUTPUT, self.name)
        done_failed = await asyncio.to_thread(progress.recorded, run.work, ERRORS, self.name)
        total = run.batch.request_counts.total
        run.update(request_counts=RequestCounts(total=total, completed=len(done_ok), failed=len(done_failed)))
        done = done_ok | done_failed
        model = run.batch.model
        assert model is not None  # set by validation
        queued = max(0, total - len(done))
        self.metrics.batch_queued(model, queued)
        counted = run.batch.request_counts.completed + run.batch.request_counts.failed
        with (
            progress.own(run.work, OUTPUT, self.name).open("a", encoding="utf-8") as output,
            progress.own(run.work, ERRORS, self.name).open("a", encoding="utf-8") as errors,
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
        await self._save(run)

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
        task = asyncio.current_task()
        assert task is not None
        try:
            run.answering.add(task)
            try:
                status, body = await self.answer(run.batch.endpoint, line.body, run.owner)
                delay = _RETRY_S
                while status == 503 and self.now() < (run.batch.expires_at or float("inf")):
                    # The model is loading (a restart resumes batches before its engine is up),
                    # restarting or draining: a batch waits for it instead of failing the line.
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _RETRY_MAX_S)
                    status, body = await self.answer(run.batch.endpoint, line.body, run.owner)
            finally:
                run.answering.discard(task)
            ok = 200 <= status < 300
            run.count(completed=int(ok), failed=int(not ok))
            try:
                # Fenced by the lease, before the line is written: a runner that lost the batch to
                # another one writes nothing more (the counts a crash leaves here are read again
                # from the files at resume).
                await self._save(run)
            except _LeaseLost:
                return
            except OvserveError:  # the store is down (logged): the line is kept, the file is the progress
                pass
            target = output if ok else errors
            target.write(lines.output_line(line.custom_id, status, body))
            target.flush()  # recorded before the slot goes back: a crash from here on keeps it
            self.metrics.batch_line(model, "completed" if ok else "failed")
        finally:
            self.share.release(slot)

    async def _finalize(self, run: _Run) -> None:
        batch, work = run.batch, run.work
        if batch.output_file_id is None and batch.error_file_id is None:
            # Every runner's lines merged, each custom_id once, and the file ids written down before
            # the files move: a crash in between is finished by the next start (adopt is idempotent).
            seen: set[str] = set()
            ok = await asyncio.to_thread(progress.merge, work, OUTPUT, seen)
            failed = await asyncio.to_thread(progress.merge, work, ERRORS, seen)
            counts = RequestCounts(total=batch.request_counts.total, completed=ok, failed=failed)
            ids = {"output_file_id": new_file_id() if ok else None, "error_file_id": new_file_id() if failed else None}
            run.update(request_counts=counts, **ids)
            await self._save(run)
        batch = run.batch
        for kind, file_id in ((OUTPUT, batch.output_file_id), (ERRORS, batch.error_file_id)):
            if file_id is not None:
                name, path = f"{batch.id}_{kind}.jsonl", progress.final(work, kind)
                await self.files.adopt(path, file_id, run.owner, name, "batch_output", batch.output_expiry_s)
        now = self._time()
        if batch.status == "cancelling":
            final = batch.model_copy(update={"status": "cancelled", "cancelled_at": now})
        elif batch.expired_at is not None:
            final = batch.model_copy(update={"status": "expired"})
        else:
            final = batch.model_copy(update={"status": "completed", "completed_at": now})
        # The work directory holds nothing any more (its files moved): gone before the final
        # status, so a batch that reads completed has left nothing behind.
        await asyncio.to_thread(shutil.rmtree, work, True)
        # Written before this runner shows it: every replica reads the final status at once.
        await self._save(run, final)
        run.batch = final
        log.info("batch %s: %s (%s)", batch.id, run.batch.status, run.batch.request_counts.encode())


class _LeaseLost(Exception):
    """Another runner holds the batch's lease now: this one stops without writing."""


# A batch request answered 503 (its model not ready) is tried again after these many seconds, doubling.
_RETRY_S, _RETRY_MAX_S = 0.5, 10.0
_EXPIRED = "This request could not be executed before the completion window expired."
