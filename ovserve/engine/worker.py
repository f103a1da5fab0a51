"""The engine process: owns one pipeline and the loop that drives it (continuous batching,
stateful, or a retrieval model: see :class:`RetrievalEngineLoop` and ``ovserve.engine.retrieval``).

Why a process: ``step()`` holds the GIL for much of a step, so an in-process engine stalls the
server's event loop by up to a step. Here, one thread (this process's main thread) adds
requests, calls ``step()``, drains handles and cancels; a reader thread only moves commands from
the pipe into a queue; a VLM request's ``add_request`` (which runs the vision encoder) runs on an
admission thread, its handle handed back through the same queue, so running streams keep
stepping meanwhile. Text is detokenized here, one batched call per step, so the server process
only relays strings.

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
import functools
import json
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ovserve.engine.channel import PipeChannel
from ovserve.engine.detokenizer import DecodeBatch, Detokenizer, IncrementalDetokenizer, decode_now
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    Command,
    EmbedRequest,
    EmbedResult,
    EngineErrorKind,
    EnginePrompt,
    EngineStats,
    Event,
    Fatal,
    GenerationParams,
    Heartbeat,
    Ready,
    RequestEnded,
    RerankRequest,
    RerankResult,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
    TokenLogprob,
    VisionPrompt,
)
from ovserve.engine.prefix_cache import PrefixCacheModel
from ovserve.engine.retrieval import Embedder, Reranker, build_retrieval_model
from ovserve.engine.spec import SLOW_ADMISSION_S, EngineFault, EngineSpec, PipelineKind, SchedulerSettings
from ovserve.memory import pin_malloc_thresholds
from ovserve.vision import VISION_ENCODER_FILE

log = logging.getLogger("ovserve.engine")


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


_STEPS_TO_FREE = 2

# The block-size probe's request id: far from the server's ids, which count up from 0.
_PROBE_REQUEST_ID = 2**62

# The engine reports its state (and so that it is alive) at least this often, idle or busy: the
# server's watchdog takes silence for a hang (ovserve.engine.client).
_HEARTBEAT_INTERVAL_S = 1.0
# Vocabularies up to this size get a token-piece table (~70 bytes per id); 256k covers Gemma's.
_MAX_VOCAB_PIECES = 300_000

# GenerationConfig's own "consider every token" value (SIZE_MAX).
_NO_TOP_K = 2**64 - 1

# What a client is told; the engine's own message is logged here.
_REFUSED = "the engine refused the request's generation settings (the server log has the engine's reason)"
_IGNORED = "the engine could not schedule the request (not enough KV cache for its prompt)"
_FAILED = "the engine failed while generating this request; retry it (the server log has the details)"

_FINISH_REASONS = {"STOP": "stop", "LENGTH": "length", "TOOL_CALL": "stop"}


def build_generation_config(pipe: Any, params: GenerationParams) -> Any:
    """Map resolved :class:`GenerationParams` onto the pipeline's config.

    ``pipe.get_config()`` carries the model's eos/stop token ids; every sampling field is then
    set explicitly so nothing falls back to a value the server did not choose.
    """
    # ContinuousBatchingPipeline.get_config() / LLMPipeline.get_generation_config(): same content.
    cfg = pipe.get_config() if hasattr(pipe, "get_config") else pipe.get_generation_config()
    cfg.max_new_tokens = params.max_new_tokens
    cfg.ignore_eos = params.ignore_eos
    cfg.repetition_penalty = params.repetition_penalty
    cfg.presence_penalty = params.presence_penalty
    cfg.frequency_penalty = params.frequency_penalty
    cfg.apply_chat_template = False  # the server already rendered the template
    cfg.logprobs = 1 if params.logprobs else 0
    if params.stop:
        # The engine matches stop strings at token granularity; the server trims exactly.
        cfg.stop_strings = set(params.stop)
        cfg.include_stop_str_in_output = True
    requested_stops = set(params.stop_token_ids)
    if requested_stops and params.ignore_eos:
        # The engine's ignore_eos ignores every stop token; ignore_eos means the model's EOS only
        # (vLLM), so the request's stop tokens replace the EOS ids and ignore_eos goes off.
        # validate() wants eos_token_id among the stop ids: one of the request's stands in.
        cfg.ignore_eos = False
        cfg.eos_token_id = min(requested_stops)
        cfg.stop_token_ids = requested_stops
    elif requested_stops:
        # Added to the model's EOS ids, which get_config() already put there.
        cfg.stop_token_ids = set(cfg.stop_token_ids) | requested_stops
    if params.beam_search:
        cfg.do_sample = False
        cfg.num_beams = params.best_of
        cfg.num_beam_groups = 1
        cfg.num_return_sequences = params.n
        cfg.length_penalty = params.length_penalty
    elif params.temperature == 0.0:
        cfg.do_sample = False
        cfg.num_return_sequences = 1
    else:
        cfg.do_sample = True
        cfg.temperature = params.temperature
        cfg.top_p = params.top_p
        # get_config() carries generation_config.json's top_k: "no filter" must be set explicitly.
        cfg.top_k = params.top_k if params.top_k > 0 else _NO_TOP_K
        cfg.min_p = params.min_p
        cfg.num_return_sequences = params.n
        # OVMS: an omitted seed means a random one; the engine's default would repeat itself.
        seed = params.seed
        cfg.rng_seed = seed if seed is not None else random.getrandbits(32)
    if params.structured_output:
        import openvino_genai as ov_genai

        # Compiled by the engine (xgrammar); a pattern it rejects fails add_request -> the client's 400.
        cfg.structured_output_config = _structured_output_config(ov_genai, params.structured_output)
    # Speculative / prompt-lookup knobs; the server only sends them to pipelines that use them.
    if params.num_assistant_tokens is not None:
        cfg.num_assistant_tokens = params.num_assistant_tokens
    if params.assistant_confidence_threshold is not None:
        cfg.assistant_confidence_threshold = params.assistant_confidence_threshold
    if params.max_ngram_size is not None:
        cfg.max_ngram_size = params.max_ngram_size
    cfg.validate()
    return cfg


def _structured_output_config(ov_genai: Any, spec: dict[str, str]) -> Any:
    """The engine object of a GrammarSpec (see ovserve.service.guided)."""
    config = ov_genai.StructuredOutputConfig
    if "trigger" not in spec:
        return config(regex=spec["regex"])
    tag = config.Tag(spec["begin"], config.Regex(spec["regex"]), spec["end"])
    return config(compound_grammar=config.TriggeredTags(triggers=[spec["trigger"]], tags=[tag]))


def _scheduler_config(settings: SchedulerSettings) -> Any:
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = settings.cache_size
    scheduler.max_num_seqs = settings.max_num_seqs
    scheduler.max_num_batched_tokens = settings.max_num_batched_tokens
    scheduler.dynamic_split_fuse = settings.dynamic_split_fuse
    scheduler.enable_prefix_caching = settings.enable_prefix_caching
    return scheduler


def build_pipeline(spec: EngineSpec) -> Any:
    """The pipeline of ``spec.kind``: continuous batching (plain, speculative, prompt lookup) or
    stateful; for embeddings and rerank, the retrieval model (``ovserve.engine.retrieval``)."""
    import openvino_genai as ov_genai

    if not spec.kind.generates:
        return build_retrieval_model(spec)
    properties: dict[str, Any] = dict(spec.plugin_config)
    if spec.kind is PipelineKind.STATEFUL:
        return ov_genai.LLMPipeline(str(spec.model_path), spec.device, **properties)
    if spec.kind is PipelineKind.SPECULATIVE:
        assert spec.draft_models_path is not None and spec.draft_scheduler is not None
        properties["draft_model"] = ov_genai.draft_model(
            str(spec.draft_models_path),
            spec.draft_device or spec.device,
            scheduler_config=_scheduler_config(spec.draft_scheduler),
        )
    elif spec.kind is PipelineKind.PROMPT_LOOKUP:
        properties["prompt_lookup"] = True
    return ov_genai.ContinuousBatchingPipeline(
        str(spec.model_path), _scheduler_config(spec.scheduler), spec.device, properties
    )


@dataclass(slots=True)
class _Admitted:
    """A VLM request whose ``add_request`` ran on the admission thread (engine-internal, never on the wire)."""

    request_id: int
    params: GenerationParams
    future: concurrent.futures.Future[Any]


class _LoopBase:
    """What both engine loops share: the pipe, the command queue its reader thread fills, sending."""

    def __init__(self, pipe: Any, conn: PipeChannel) -> None:
        self._pipe = pipe
        # Retrieval pipelines keep their tokenizer to themselves (and need none here).
        self._tokenizer: Any = pipe.get_tokenizer() if hasattr(pipe, "get_tokenizer") else None
        self._conn = conn
        self._commands: queue.SimpleQueue[Command | _Admitted] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._running = True

    def start_reader(self) -> None:
        threading.Thread(target=self._read_commands, name="ovserve-engine-reader", daemon=True).start()

    def _read_commands(self) -> None:
        while True:
            try:
                command: Command = self._conn.recv()
            except (EOFError, OSError):
                self._commands.put(Shutdown())
                return
            if self._on_command_received(command):
                self._commands.put(command)

    def _on_command_received(self, command: Command) -> bool:
        """Runs on the reader thread; False when the command was fully handled there."""
        return True

    def _send(self, events: list[Event]) -> None:
        try:
            with self._send_lock:  # the stateful loop sends from its reader thread too
                self._conn.send(events)
        except (BrokenPipeError, OSError):
            self._running = False  # the server is gone; nothing left to serve


class EngineLoop(_LoopBase):
    """The single thread that touches the pipeline."""

    def __init__(
        self,
        pipe: Any,
        conn: PipeChannel,
        fault: EngineFault | None = None,
        prefix_cache: PrefixCacheModel | None = None,
        block_bytes: int | None = None,
        vocab_size: int | None = None,
    ) -> None:
        super().__init__(pipe, conn)
        self._detokenizer = _detokenizer(self._tokenizer, vocab_size)
        # The model of the engine's prefix cache (text prompts, prefix caching on), and the bytes
        # of one KV block, which turn the cache's size into the model's capacity.
        self._prefix_cache = prefix_cache
        self._block_bytes = block_bytes
        self._active: dict[int, _Active] = {}
        self._added_since_step: list[int] = []
        # Finished and cancelled handles stay referenced for a few more steps: the pipeline frees
        # a request during the step after it ends and updates its metrics one step later.
        self._releasing: dict[int, tuple[Any, int]] = {}
        self._fault = fault
        self._fail_next_step = False
        self._stall_next_step = False
        # VLM requests whose add_request (the vision encoder runs inside it) is on the admission
        # thread, and those of them cancelled meanwhile.
        self._admitting: set[int] = set()
        self._cancelled_while_admitting: set[int] = set()
        self._admission: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self) -> None:
        import openvino as ov

        self._ov = ov
        last_beat = 0.0
        while self._running:
            busy = bool(self._active) or bool(self._releasing)
            events: list[Event] = []
            # Idle, the wait for a command is bounded by the heartbeat: silence means a hang.
            self._drain_commands(wait=None if busy else _HEARTBEAT_INTERVAL_S, events=events)
            if self._active or self._releasing:
                self._step(events)
            now = time.monotonic()
            went_idle = busy and not self._active and not self._releasing
            if now - last_beat >= _HEARTBEAT_INTERVAL_S or went_idle:
                events.append(Heartbeat(self._stats()))
                last_beat = now
            if events:
                self._send(events)

    def _drain_commands(self, *, wait: float | None, events: list[Event]) -> None:
        """Handle every queued command; with ``wait``, wait that long for the first one."""
        block = wait is not None
        while True:
            try:
                command = self._commands.get(block=block, timeout=wait)
            except queue.Empty:
                return
            block = False
            match command:
                case AddRequest(request_id, prompt, params):
                    self._add(request_id, prompt, params, events)
                case CancelRequest(request_id):
                    self._cancel(request_id, events)
                case StatsRequest(token):
                    events.append(StatsReply(token, self._stats()))
                case _Admitted():
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
                delay = 0.0
                if self._fault is not None and params.max_new_tokens == self._fault.slow_admission_on_max_new_tokens:
                    delay = SLOW_ADMISSION_S
                future = self._admission_thread().submit(self._admit, request_id, prompt.text, images, cfg, delay)
                self._admitting.add(request_id)
                future.add_done_callback(lambda done: self._commands.put(_Admitted(request_id, params, done)))
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
        events.append(RequestEnded(request_id, EngineErrorKind.REFUSED, _REFUSED))

    def _admission_thread(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._admission is None:
            self._admission = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ovserve-engine-admission")
        return self._admission

    def _admit(self, request_id: int, text: str, images: list[Any], cfg: Any, delay: float) -> Any:
        """On the admission thread: the VLM's add_request (``delay``: the slow-admission fault)."""
        if delay:
            time.sleep(delay)
        return self._pipe.add_request(request_id, text, images, cfg)

    def _on_admitted(self, admitted: _Admitted, events: list[Event]) -> None:
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
            self._releasing[request_id] = (handle, _STEPS_TO_FREE)
            return
        self._register(request_id, handle, admitted.params)

    def _register(self, request_id: int, handle: Any, params: GenerationParams) -> _Active:
        active = _Active(handle=handle, params=params)
        self._active[request_id] = active
        self._added_since_step.append(request_id)
        if self._fault is not None and params.max_new_tokens == self._fault.fail_step_on_max_new_tokens:
            self._fail_next_step = True
        if self._fault is not None and params.max_new_tokens == self._fault.stall_step_on_max_new_tokens:
            self._stall_next_step = True
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
        self._releasing[request_id] = (active.handle, _STEPS_TO_FREE)
        events.append(RequestEnded(request_id))

    def _stats(self) -> EngineStats:
        metrics = self._pipe.get_metrics()
        if self._prefix_cache is not None and self._block_bytes:
            # A cache grown on demand changes size: the model holds what the cache can.
            self._prefix_cache.resize(int(metrics.kv_cache_size_in_bytes) // self._block_bytes)
        return EngineStats(
            active_requests=len(self._active) + len(self._admitting),
            releasing_requests=len(self._releasing),
            engine_requests=int(metrics.requests),
            scheduled_requests=int(metrics.scheduled_requests),
            cache_usage=float(metrics.cache_usage) / 100.0,  # the pipeline reports a percentage
            kv_cache_bytes=int(metrics.kv_cache_size_in_bytes),
        )

    def _step(self, events: list[Event]) -> None:
        try:
            if self._fail_next_step:
                self._fail_next_step = False
                raise RuntimeError("injected step failure (EngineSpec.fault)")
            if self._stall_next_step:
                log.warning("injected stall (EngineSpec.fault): this engine stops making progress")
                threading.Event().wait()  # forever, as a hung step() would; the watchdog kills us
            self._pipe.step()
        except Exception as exc:
            self._fail_after_step_error(exc, events)
            return
        self._added_since_step.clear()
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

    def _fail_after_step_error(self, exc: Exception, events: list[Event]) -> None:
        suspects = self._added_since_step or list(self._active)
        log.error("step() failed; failing %d request(s): %s", len(suspects), exc)
        for request_id in suspects:
            active = self._active.pop(request_id, None)
            if active is None:
                continue
            active.handle.cancel()
            self._releasing[request_id] = (active.handle, _STEPS_TO_FREE)
            events.append(RequestEnded(request_id, EngineErrorKind.ENGINE, _FAILED))
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
        self._releasing[request_id] = (handle, _STEPS_TO_FREE)
        if status == "IGNORED":
            outputs.append(RequestEnded(request_id, EngineErrorKind.IGNORED, _IGNORED))
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


class StatefulEngineLoop(_LoopBase):
    """``LLMPipeline`` (the stateful path OVMS uses on NPU): one generation at a time, in order.

    ``generate()`` blocks this thread, so the reader thread records cancellations in a set the
    streamer checks after every token; queued requests wait in ``_pending``.
    """

    def __init__(self, pipe: Any, conn: PipeChannel, vocab_size: int | None = None) -> None:
        super().__init__(pipe, conn)
        self._detokenizer = _detokenizer(self._tokenizer, vocab_size)
        self._cancelled: set[int] = set()
        self._outstanding: set[int] = set()  # added and not yet ended (kept by the reader thread)
        self._pending: list[AddRequest] = []
        self._current: int | None = None

    def _on_command_received(self, command: Command) -> bool:
        # generate() holds the loop thread for a whole generation: the reader thread keeps the
        # books (cancels reach the streamer through _cancelled) and answers stats itself.
        match command:
            case AddRequest(request_id):
                self._outstanding.add(request_id)
            case CancelRequest(request_id):
                self._cancelled.add(request_id)
                self._outstanding.discard(request_id)
            case StatsRequest(token):
                self._send([StatsReply(token, self._stats())])
                return False
        return True

    def _stats(self) -> EngineStats:
        busy = int(self._current is not None)
        return EngineStats(
            active_requests=len(self._outstanding),
            releasing_requests=0,
            engine_requests=busy,
            scheduled_requests=busy,
            cache_usage=0.0,
        )

    def run(self) -> None:
        import openvino as ov

        self._ov = ov
        last_beat = 0.0
        while self._running:
            # Drain every queued command before the next generation (a cancel of a queued request
            # must drop it before it starts); wait for one only when nothing is pending, and no
            # longer than a heartbeat (a generation's tokens are its signs of life).
            block = not self._pending
            while True:
                try:
                    command = self._commands.get(block=block, timeout=_HEARTBEAT_INTERVAL_S)
                except queue.Empty:
                    break
                block = False
                self._handle(command)
            if time.monotonic() - last_beat >= _HEARTBEAT_INTERVAL_S:
                self._send([Heartbeat(self._stats())])
                last_beat = time.monotonic()
            if self._pending and self._running:
                self._generate(self._pending.pop(0))

    def _handle(self, command: Command | _Admitted) -> None:  # _Admitted: continuous batching only
        match command:
            case AddRequest():
                self._pending.append(command)
            case CancelRequest(request_id):
                before = len(self._pending)
                self._pending = [add for add in self._pending if add.request_id != request_id]
                if len(self._pending) != before:
                    self._cancelled.discard(request_id)
                    self._send([RequestEnded(request_id)])
            case Shutdown():
                self._running = False

    def _generate(self, add: AddRequest) -> None:
        import openvino_genai as ov_genai

        request_id, params = add.request_id, add.params
        assert not isinstance(add.prompt, VisionPrompt), "a VLM is never served by the stateful pipeline"
        decoder = IncrementalDetokenizer(params.skip_special_tokens)
        detokenizer = self._detokenizer
        generated = 0
        outer = self

        class _Streamer(ov_genai.StreamerBase):
            def write(self, token: Any) -> Any:
                nonlocal generated
                ids = [token] if isinstance(token, int) else list(token)
                generated += len(ids)
                if ids:
                    text = decode_now(detokenizer, decoder, ids)
                    outer._send([SequenceOutput(request_id, 0, text, len(ids), None, None)])
                if request_id in outer._cancelled:
                    return ov_genai.StreamingStatus.CANCEL
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        self._current = request_id
        try:
            cfg = build_generation_config(self._pipe, params)
            input_ids = self._ov.Tensor(np.array([add.prompt], dtype=np.int64))
            self._pipe.generate(input_ids, cfg, _Streamer())
        except Exception as exc:
            log.warning("stateful generation of request %d failed: %s", request_id, exc)
            self._send([RequestEnded(request_id, EngineErrorKind.ENGINE, _FAILED)])
            return
        finally:
            self._current = None
            self._outstanding.discard(request_id)
        if request_id in self._cancelled:
            self._cancelled.discard(request_id)
            self._send([RequestEnded(request_id)])
            return
        finish = "length" if generated >= params.max_new_tokens else "stop"
        rest = decode_now(detokenizer, decoder, [], ends=True)
        self._send([SequenceOutput(request_id, 0, rest, 0, None, finish), RequestEnded(request_id)])


class RetrievalEngineLoop(_LoopBase):
    """An embeddings or rerank model (``ovserve.engine.retrieval``): one request at a time, in
    arrival order, each split into calls of at most ``embeddings_batch_size`` inputs.

    A model call blocks this thread (releasing the GIL), so, as in the stateful loop, the
    reader thread answers stats itself and records cancellations, which take effect between calls.
    A heartbeat goes out every second while idle, and after any call that ends more than a second
    after the last one, so neither silence while idle nor a long request is mistaken for a stall.
    """

    def __init__(self, pipe: Embedder | Reranker, conn: PipeChannel, spec: EngineSpec) -> None:
        super().__init__(pipe, conn)
        self._model = pipe
        self._batch_size = spec.retrieval.embeddings_batch_size
        self._outstanding: set[int] = set()  # received and not yet answered (kept by the reader)
        self._cancelled: set[int] = set()
        self._busy = False
        self._last_beat = 0.0

    def _stats(self) -> EngineStats:
        busy = int(self._busy)
        return EngineStats(
            active_requests=len(self._outstanding),
            releasing_requests=0,
            engine_requests=busy,
            scheduled_requests=busy,
            cache_usage=0.0,
        )

    def _on_command_received(self, command: Command) -> bool:
        match command:
            case EmbedRequest(request_id) | RerankRequest(request_id):
                self._outstanding.add(request_id)
            case CancelRequest(request_id):
                if request_id in self._outstanding:
                    self._cancelled.add(request_id)
                return False
            case StatsRequest(token):
                self._send([StatsReply(token, self._stats())])
                return False
        return True

    def run(self) -> None:
        while self._running:
            try:
                command = self._commands.get(timeout=_HEARTBEAT_INTERVAL_S)
            except queue.Empty:
                self._beat()  # idle: still alive
                continue
            match command:
                case EmbedRequest(request_id, texts) if isinstance(self._model, Embedder):
                    self._serve(request_id, texts, self._model.embed, self._embedded)
                case RerankRequest(request_id, query, documents) if not isinstance(self._model, Embedder):
                    self._serve(request_id, documents, functools.partial(self._model.score, query), self._reranked)
                case AddRequest(request_id) | EmbedRequest(request_id) | RerankRequest(request_id):
                    # The server routes each task to its own models; never hang on another task's request.
                    self._send([RequestEnded(request_id, EngineErrorKind.REFUSED, "this model serves another task")])
                case Shutdown():
                    self._running = False

    @staticmethod
    def _embedded(request_id: int, parts: list[np.ndarray]) -> Event:
        return EmbedResult(request_id, np.concatenate(parts) if parts else np.zeros((0, 0), np.float32))

    @staticmethod
    def _reranked(request_id: int, parts: list[list[float]]) -> Event:
        return RerankResult(request_id, [score for part in parts for score in part])

    def _serve(self, request_id: int, items: list[str], call: Any, result: Any) -> None:
        self._busy = True
        parts: list[Any] = []
        try:
            for start in range(0, len(items), self._batch_size):
                if request_id in self._cancelled:
                    self._send([RequestEnded(request_id)])
                    return
                parts.append(call(items[start : start + self._batch_size]))
                self._beat()
            self._send([result(request_id, parts)])
        except Exception as exc:
            log.warning("request %d failed in the pipeline: %s", request_id, exc)
            self._send([RequestEnded(request_id, EngineErrorKind.ENGINE, _FAILED)])
        finally:
            self._busy = False
            self._outstanding.discard(request_id)
            self._cancelled.discard(request_id)
            if not self._outstanding:
                self._send([Heartbeat(self._stats())])

    def _beat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= _HEARTBEAT_INTERVAL_S:
            self._last_beat = now
            self._send([Heartbeat(self._stats())])


def main(conn: PipeChannel, spec: EngineSpec, log_level: int = logging.INFO) -> None:
    """Entry point of the engine process (``multiprocessing`` spawn target)."""
    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s [engine {spec.name}] %(message)s")
    # Before the pipeline and any request: freed buffers must go back to the OS (ovserve.memory).
    pin_malloc_thresholds()
    try:
        pipe = build_pipeline(spec)
    except Exception as exc:
        conn.send([Fatal(f"could not load {spec.model_path} ({spec.kind.value}) on {spec.device}: {exc}")])
        return
    loop: EngineLoop | StatefulEngineLoop | RetrievalEngineLoop
    if not spec.kind.generates:
        loop = RetrievalEngineLoop(pipe, conn, spec)
    elif spec.kind.continuous_batching:
        prefix_cache, block_bytes = None, None
        if spec.scheduler.enable_prefix_caching and not _is_vlm(spec.model_path):
            prefix_cache = PrefixCacheModel()
            # Drafting pipelines refuse a request without their drafting settings: those keep the
            # model's default capacity.
            block_bytes = _measure_block_bytes(pipe) if spec.kind is PipelineKind.CONTINUOUS_BATCHING else None
        loop = EngineLoop(pipe, conn, spec.fault, prefix_cache, block_bytes, _vocab_size(spec.model_path))
    else:
        loop = StatefulEngineLoop(pipe, conn, _vocab_size(spec.model_path))
    conn.send([Ready(os.getpid())])
    loop.start_reader()
    loop.run()


def _vocab_size(model_path: Path) -> int | None:
    """The ids the model can generate (its config's ``vocab_size``), if the config says."""
    try:
        config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # A VLM keeps its language model's settings in a nested config.
    nested = [config.get(key) for key in ("text_config", "llm_config")]
    sizes = [config.get("vocab_size")] + [sub.get("vocab_size") for sub in nested if isinstance(sub, dict)]
    return next((size for size in sizes if isinstance(size, int) and size > 0), None)


def _detokenizer(tokenizer: Any, vocab_size: int | None) -> Detokenizer:
    """The loop's detokenizer, with token pieces when the vocabulary's size is known and not huge."""
    detokenizer = Detokenizer(tokenizer)
    if vocab_size is not None and vocab_size <= _MAX_VOCAB_PIECES:
        started = time.monotonic()
        detokenizer.learn_pieces(vocab_size)
        log.debug("token pieces of %d ids in %.2f s", vocab_size, time.monotonic() - started)
    return detokenizer


def _is_vlm(model_path: Path) -> bool:
    """A VLM directory (openvino_genai's layout): its prompts are never token ids."""
    return (model_path / VISION_ENCODER_FILE).is_file()


def _measure_block_bytes(pipe: Any) -> int | None:
    """The bytes of one KV block, measured with a one-token request before readiness.

    One token takes one block, so the cache's usage (a percentage of its blocks) tells its block
    count, and its size in bytes the block's; the KV precision and layout the plugin chose need
    not be known. The request also compiles the first inference before any client waits for it.
    """
    import openvino as ov

    cfg = pipe.get_config()
    cfg.max_new_tokens = 2  # still running after the first step, when the usage is read
    cfg.ignore_eos = True
    cfg.do_sample = False
    cfg.apply_chat_template = False
    token = pipe.get_tokenizer().encode("a", add_special_tokens=False).input_ids.data[0][:1].tolist() or [0]
    handle = pipe.add_request(_PROBE_REQUEST_ID, ov.Tensor(np.array([token], dtype=np.int64)), cfg)
    pipe.step()
    metrics = pipe.get_metrics()
    while pipe.has_non_finished_requests():
        pipe.step()
    if handle.can_read():  # read() with nothing pending would block
        handle.read_all()
    for _ in range(_STEPS_TO_FREE):  # the pipeline frees the request in the steps that follow
        pipe.step()
    usage = float(metrics.cache_usage) / 100.0
    if usage <= 0:
        log.warning("could not measure the KV block size; cached_tokens are counted without a capacity bound")
        return None
    blocks = round(1 / usage)
    return int(metrics.kv_cache_size_in_bytes) // blocks if blocks else None
