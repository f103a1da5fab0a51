"""The continuous-batching engine loop (plain, speculative, prompt lookup; LLM or VLM).

One thread (the engine process's main thread) adds requests, calls ``step()``, drains handles and
cancels; the reader thread only moves commands into the queue (``ovserve.engine.loop``); a VLM
request's ``add_request`` (which runs the vision encoder) runs on an admission thread, its handle
handed back through the same queue, so running streams keep stepping meanwhile. Text is
detokenized here, one batched call per step, so the server process only relays strings.

Engine traps this loop is built around (see shared/feasibility.md):
- ``handle.read()`` with nothing pending blocks holding the GIL: read only after ``can_read()``.
- a garbage-collected handle silently drops its request: handles stay in ``_active`` until
  the engine has released them.
- duplicate request ids break ``step()``: ids come from the server's monotonic counter.
- after ``cancel()`` no final output is delivered: RequestEnded is sent from here instead.
- if ``step()`` raises, the affected handle stays RUNNING forever: the requests added since the
  last good step are failed and cancelled (or all, if none were new).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ovserve.engine.channel import PipeChannel
from ovserve.engine.detokenizer import DecodeBatch, IncrementalDetokenizer
from ovserve.engine.loop import (
    FAILED,
    HEARTBEAT_INTERVAL_S,
    IGNORED,
    REFUSED,
    STEPS_TO_FREE,
    Admitted,
    LoopBase,
    detokenizer,
)
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    EngineErrorKind,
    EnginePrompt,
    EngineStats,
    Event,
    GenerationParams,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
    TokenLogprob,
    VisionPrompt,
)
from ovserve.engine.pipelines import build_generation_config
from ovserve.engine.prefix_cache import PrefixCacheModel

log = logging.getLogger("ovserve.engine")

# At exit, at most this many steps for cancelled requests to leave the scheduler.
_MAX_STEPS_TO_DRAIN = 8

_FINISH_REASONS = {"STOP": "stop", "LENGTH": "length", "TOOL_CALL": "stop"}


@dataclass
class _Beam:
    """One beam's tokens, kept until the request ends: only then are the best n known."""

    ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    score: float = float("-inf")
    finish: str | None = None


@dataclass
class _Active:
    handle: Any
    params: GenerationParams
    # Keyed by choice index. The engine keys outputs by its own sequence ids (beam search uses
    # ids such as 3, 4, 5), so they are renumbered 0..n-1 in order of appearance.
    decoders: dict[int, IncrementalDetokenizer] = field(default_factory=dict)
    finished_seqs: set[int] = field(default_factory=set)
    choice_of: dict[int, int] = field(default_factory=dict)
    beams: dict[int, _Beam] = field(default_factory=dict)
    # With the prefix-cache model: the prompt's ids, and its cached count until the first
    # output carries it to the server.
    prompt: list[int] | None = None
    cached_tokens: int | None = None
    prefilled: bool = False

    def choice(self, seq_id: int) -> int:
        return self.choice_of.setdefault(seq_id, len(self.choice_of))

    def take_cached_tokens(self) -> int | None:
        cached, self.cached_tokens = self.cached_tokens, None
        return cached


class EngineLoop(LoopBase):
    """The single thread that touches the pipeline."""

    def __init__(
        self,
        pipe: Any,
        conn: PipeChannel,
        prefix_cache: PrefixCacheModel | None = None,
        block_bytes: int | None = None,
        vocab_size: int | None = None,
        block_size: int = 0,
    ) -> None:
        super().__init__(pipe, conn)
        self._detokenizer = detokenizer(self._tokenizer, vocab_size)
        # The model of the engine's prefix cache (text prompts, prefix caching on), and the bytes
        # of one KV block, which turn the cache's size into its block count (the model's capacity,
        # and /metrics'); the tokens one block holds (0: not known).
        self._prefix_cache = prefix_cache
        self._block_bytes = block_bytes
        self._block_size = block_size
        self._active: dict[int, _Active] = {}
        self._added_since_step: list[int] = []
        # Finished and cancelled handles stay referenced for a few more steps: the pipeline frees
        # a request during the step after it ends and updates its metrics one step later.
        self._releasing: dict[int, tuple[Any, int]] = {}
        # VLM requests whose add_request (the vision encoder runs inside it) is on the admission
        # thread, and those of them cancelled meanwhile.
        self._admitting: set[int] = set()
        self._cancelled_while_admitting: set[int] = set()
        self._admission: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self) -> None:
        import openvino as ov

        self._ov = ov
        while self._running:
            busy = bool(self._active) or bool(self._releasing)
            events: list[Event] = []
            # Idle, the wait for a command is bounded by the heartbeat: silence means a hang.
            self._drain_commands(wait=None if busy else HEARTBEAT_INTERVAL_S, events=events)
            if self._active or self._releasing:
                self._step(events)
            went_idle = busy and not self._active and not self._releasing
            heartbeat = self._due_heartbeat(time.monotonic(), force=went_idle)
            if heartbeat is not None:
                events.append(heartbeat)
            if events:
                self._send(events)
        self._release_everything()

    def _release_everything(self) -> None:
        """Before the process exits: cancel what still runs (a drain past its timeout cuts streams on
        purpose) and step until the pipeline has freed it, so its destructor finds no leaked block
        tables or KV blocks to complain about."""
        if self._admission is not None:
            self._admission.shutdown(wait=True)  # a VLM add_request in progress returns its handle first
            while True:
                try:
                    command = self._commands.get(block=False)
                except queue.Empty:
                    break
                if isinstance(command, Admitted) and command.future.exception() is None:
                    self._releasing[command.request_id] = (command.future.result(), STEPS_TO_FREE)
        for request_id in list(self._active):
            self._cancel(request_id, [])  # nobody is listening any more
        if not self._releasing:
            return
        for handle, _ in self._releasing.values():
            handle.cancel()
        try:
            for _ in range(_MAX_STEPS_TO_DRAIN):
                if not self._pipe.has_non_finished_requests():
                    break
                self._pipe.step()
            for _ in range(STEPS_TO_FREE):  # the pipeline frees a request in the steps after it ends
                self._pipe.step()
        except Exception as exc:  # exiting anyway: say so, once
            log.warning("could not release %d request(s) before exiting: %s", len(self._releasing), exc)
        self._releasing.clear()

    def _drain_commands(self, *, wait: float | None, events: list[Event]) -> None:
        """Handle every queued command; with ``wait``, wait that long for the first one."""
        for command in self._queued(wait):
            match command:
                case AddRequest(request_id, prompt, params):
                    self._add(request_id, prompt, params, events)
                case CancelRequest(request_id):
                    self._cancel(request_id, events)
                case StatsRequest(token):
                    events.append(StatsReply(token, self._stats()))
                case Admitted():
                    self._on_admitted(command, events)
                case Shutdown():
                    self._running = False
                    return

    def _add(self, request_id: int, prompt: EnginePrompt, params: GenerationParams, events: list[Event]) -> None:
        try:
            cfg = build_generation_config(self._pipe, params)
            if isinstance(prompt, VisionPrompt) and prompt.images:
                # add_request runs the vision encoder before it returns: on this thread every
                # running stream would wait for it, so it runs on the admission thread while
                # this one keeps stepping (the pipeline takes add_request from other threads,
                # as OVMS calls it). The image arrays are not kept once it returns.
                images = [self._ov.Tensor(image[np.newaxis]) for image in prompt.images]
                future = self._admission_thread().submit(self._admit, request_id, prompt.text, images, cfg, params)
                self._admitting.add(request_id)
                future.add_done_callback(lambda done: self._commands.put(Admitted(request_id, params, done)))
                return
            if isinstance(prompt, VisionPrompt):
                # A VLM pipeline takes text, never token ids; without images nothing is encoded,
                # so a text request is added here at once, never queued behind an image's encoding.
                handle = self._pipe.add_request(request_id, prompt.text, [], cfg)
                self._register(request_id, handle, params)
                return
            input_ids = self._ov.Tensor(np.array([prompt], dtype=np.int64))
            handle = self._pipe.add_request(request_id, input_ids, cfg)
        except Exception as exc:  # a config the engine refuses: fail this request only
            self._refuse(request_id, exc, events)
            return
        active = self._register(request_id, handle, params)
        if self._prefix_cache is not None:
            active.prompt = prompt
            active.cached_tokens = self._prefix_cache.cached_tokens(prompt)

    def _refuse(self, request_id: int, exc: Exception, events: list[Event]) -> None:
        # The binding's message (C++ signatures, addresses) stays in the log, not in the answer.
        log.warning("request %d refused by the engine: %s", request_id, exc)
        events.append(RequestEnded(request_id, EngineErrorKind.REFUSED, REFUSED))

    def _admission_thread(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._admission is None:
            self._admission = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ovserve-engine-admission")
        return self._admission

    def _admit(self, request_id: int, text: str, images: list[Any], cfg: Any, params: GenerationParams) -> Any:
        """On the admission thread: the VLM's add_request."""
        return self._pipe.add_request(request_id, text, images, cfg)

    def _on_admitted(self, admitted: Admitted, events: list[Event]) -> None:
        request_id = admitted.request_id
        self._admitting.discard(request_id)
        cancelled = request_id in self._cancelled_while_admitting
        self._cancelled_while_admitting.discard(request_id)
        try:
            handle = admitted.future.result()
        except Exception as exc:
            if not cancelled:  # a cancelled request's end was already sent
                self._refuse(request_id, exc, events)
            return
        if cancelled:
            handle.cancel()
            self._releasing[request_id] = (handle, STEPS_TO_FREE)
            return
        self._register(request_id, handle, admitted.params)

    def _register(self, request_id: int, handle: Any, params: GenerationParams) -> _Active:
        active = _Active(handle=handle, params=params)
        self._active[request_id] = active
        self._added_since_step.append(request_id)
        return active

    def _cancel(self, request_id: int, events: list[Event]) -> None:
        if request_id in self._admitting:  # its handle is released once add_request returns
            if request_id not in self._cancelled_while_admitting:
                self._cancelled_while_admitting.add(request_id)
                events.append(RequestEnded(request_id))
            return
        active = self._active.pop(request_id, None)
        if active is None:
            return  # already finished; its RequestEnded is on the way or sent
        active.handle.cancel()
        self._releasing[request_id] = (active.handle, STEPS_TO_FREE)
        events.append(RequestEnded(request_id))

    def _stats(self) -> EngineStats:
        metrics = self._pipe.get_metrics()
        self._track_cache_size(metrics)
        return EngineStats(
            active_requests=len(self._active) + len(self._admitting),
            releasing_requests=len(self._releasing),
            engine_requests=int(metrics.requests),
            scheduled_requests=int(metrics.scheduled_requests),
            cache_usage=float(metrics.cache_usage) / 100.0,  # the pipeline reports a percentage
            kv_cache_bytes=int(metrics.kv_cache_size_in_bytes),
            block_size=self._block_size,
            num_blocks=int(metrics.kv_cache_size_in_bytes) // self._block_bytes if self._block_bytes else 0,
        )

    def _track_cache_size(self, metrics: Any) -> None:
        """The model holds what the KV cache can: a cache grown on demand (``cache_size`` 0) grows
        inside a step to fit the sequences it runs, and keeps that size."""
        if self._prefix_cache is not None and self._block_bytes:
            self._prefix_cache.resize(int(metrics.kv_cache_size_in_bytes) // self._block_bytes)

    def _step(self, events: list[Event]) -> None:
        try:
            self._step_pipeline()
        except Exception as exc:
            self._fail_after_step_error(exc, events)
            return
        self._added_since_step.clear()
        # Before the step's blocks are remembered (in _drain): sized as the cache was before this
        # step, the model would evict the oldest blocks of a prompt longer than any before it (its
        # first blocks), and report nothing cached when it is resent, while the engine, which
        # grew the cache for it, serves all of them.
        self._track_cache_size(self._pipe.get_metrics())
        # Count down before draining, so a request that ends in this step is kept for two more.
        for request_id, (handle, steps_left) in list(self._releasing.items()):
            if steps_left <= 1:
                del self._releasing[request_id]
            else:
                self._releasing[request_id] = (handle, steps_left - 1)
        # Outputs are placed in step order; their text is filled in by one batched decode.
        outputs: list[Event | None] = []
        batch = DecodeBatch(self._detokenizer)
        for request_id, active in list(self._active.items()):
            self._drain(request_id, active, outputs, batch)
        batch.run()
        events.extend(event for event in outputs if event is not None)

    def _step_pipeline(self) -> None:
        self._pipe.step()

    def _fail_after_step_error(self, exc: Exception, events: list[Event]) -> None:
        suspects = self._added_since_step or list(self._active)
        log.error("step() failed; failing %d request(s): %s", len(suspects), exc)
        for request_id in suspects:
            active = self._active.pop(request_id, None)
            if active is None:
                continue
            active.handle.cancel()
            self._releasing[request_id] = (active.handle, STEPS_TO_FREE)
            events.append(RequestEnded(request_id, EngineErrorKind.ENGINE, FAILED))
        self._added_since_step.clear()

    def _drain(self, request_id: int, active: _Active, outputs: list[Event | None], batch: DecodeBatch) -> None:
        handle = active.handle
        status = handle.get_status().name
        while handle.can_read():
            # Sorted: choice numbers follow the engine's sequence order, not dict order.
            for seq_index, output in sorted(handle.read().items()):
                self._emit(request_id, active, seq_index, output, outputs, batch)
        if status == "RUNNING":
            return
        del self._active[request_id]
        self._releasing[request_id] = (handle, STEPS_TO_FREE)
        if status == "IGNORED":
            outputs.append(RequestEnded(request_id, EngineErrorKind.IGNORED, IGNORED))
            return
        if active.params.beam_search:
            self._emit_best_beams(request_id, active, outputs, batch)
        if self._prefix_cache is not None and active.prompt is not None:
            self._remember_sequences(self._prefix_cache, active)
        # Close every sequence that the final read did not finish explicitly.
        for seq_index, decoder in active.decoders.items():
            if seq_index not in active.finished_seqs:
                batch.add(decoder, [], True, self._placer(outputs, request_id, seq_index, 0, None, "stop"))
        outputs.append(RequestEnded(request_id))

    @staticmethod
    def _remember_sequences(prefix_cache: PrefixCacheModel, active: _Active) -> None:
        """A finished request's blocks stay cached: its prompt and what each sequence generated
        but its last token (whose KV is never computed)."""
        prompt = active.prompt or []
        grew = False
        for decoder in active.decoders.values():
            generated = decoder.ids[:-1]
            if generated:
                prefix_cache.remember(prompt + generated)
                grew = True
        if grew:
            prefix_cache.forget_tail(prompt)

    @staticmethod
    def _placer(
        outputs: list[Event | None],
        request_id: int,
        index: int,
        token_count: int,
        logprobs: list[TokenLogprob] | None,
        finish: str | None,
        cached_tokens: int | None = None,
    ) -> Callable[[str], None]:
        """Reserves the output's place in step order; the callback fills it once its text is decoded."""
        slot = len(outputs)
        outputs.append(None)

        def place(text: str) -> None:
            if text or token_count or finish is not None or cached_tokens is not None:
                outputs[slot] = SequenceOutput(request_id, index, text, token_count, logprobs, finish, cached_tokens)

        return place

    def _emit(
        self,
        request_id: int,
        active: _Active,
        seq_id: int,
        output: Any,
        outputs: list[Event | None],
        batch: DecodeBatch,
    ) -> None:
        new_ids = list(output.generated_ids)
        log_probs = [float(lp) for lp in output.generated_log_probs] if active.params.logprobs else []
        finish = _FINISH_REASONS.get(output.finish_reason.name)
        if active.params.beam_search:
            beam = active.beams.setdefault(seq_id, _Beam())
            beam.ids.extend(new_ids)
            beam.log_probs.extend(log_probs)
            beam.score = float(output.score)
            beam.finish = finish or beam.finish
            return
        self._emit_tokens(request_id, active, active.choice(seq_id), new_ids, log_probs, finish, outputs, batch)

    def _emit_best_beams(
        self, request_id: int, active: _Active, outputs: list[Event | None], batch: DecodeBatch
    ) -> None:
        # The engine returns every beam at the end (num_beams of them, not num_return_sequences).
        ranked = sorted(active.beams.values(), key=lambda beam: beam.score, reverse=True)
        for index, beam in enumerate(ranked[: active.params.n]):
            finish = beam.finish or "stop"
            self._emit_tokens(request_id, active, index, beam.ids, beam.log_probs, finish, outputs, batch)

    def _emit_tokens(
        self,
        request_id: int,
        active: _Active,
        index: int,
        new_ids: list[int],
        log_probs: list[float],
        finish: str | None,
        outputs: list[Event | None],
        batch: DecodeBatch,
    ) -> None:
        params = active.params
        token_count = len(new_ids)
        if finish == "stop" and new_ids and new_ids[-1] in params.stop_token_ids and not params.include_stop:
            # A request's stop token ends the text without appearing in it (vLLM, MindIE), unless
            # include_stop_str_in_output asks for it; it still counts as a generated token.
            new_ids = new_ids[:-1]
            log_probs = log_probs[: len(new_ids)]
        decoder = active.decoders.get(index)
        if decoder is None:
            decoder = active.decoders[index] = IncrementalDetokenizer(params.skip_special_tokens)
        if finish is not None:
            active.finished_seqs.add(index)
        logprobs: list[TokenLogprob] | None = None
        if params.logprobs:
            logprobs = [
                (token_id, self._tokenizer.decode([token_id], skip_special_tokens=False), lp)
                for token_id, lp in zip(new_ids, log_probs, strict=False)
            ]
        if not new_ids and finish is None:
            return  # nothing generated, nothing ended (a trimmed stop token always ends its sequence)
        cached = active.take_cached_tokens()
        if not active.prefilled:
            active.prefilled = True  # a first output: the prompt's blocks are computed
            if self._prefix_cache is not None and active.prompt is not None:
                self._prefix_cache.remember(active.prompt)
        place = self._placer(outputs, request_id, index, token_count, logprobs, finish, cached)
        batch.add(decoder, new_ids, finish is not None, place)
