"""The stateful engine loop (LLMPipeline) with the real pipeline and a real pipe."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from ovserve.core.generation_config import GenerationParams
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    Event,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
)
from ovserve.engine.pipelines import build_pipeline
from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.engine.stateful import StatefulEngineLoop

PARAMS = GenerationParams(
    max_new_tokens=4, temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
    presence_penalty=0.0, frequency_penalty=0.0, length_penalty=1.0, ignore_eos=True, seed=None, stop=(),
    stop_token_ids=(), include_stop=False, n=1, best_of=1, logprobs=False, skip_special_tokens=True,
    num_assistant_tokens=None, assistant_confidence_threshold=None, max_ngram_size=None, beam_search=False,
)  # fmt: skip


def received(conn) -> list[Event]:  # type: ignore[no-untyped-def]
    """Every event sent so far: each test calls it once its sender is done (the loop's thread
    joined, or the reply written before ``_on_command_received`` returned), so none is on its way."""
    events: list[Event] = []
    while conn.poll():
        events.extend(conn.recv())
    return events


def test_commands_queued_behind_a_generation_are_handled_before_the_next_one(tiny_llm: Path) -> None:
    server_end, engine_end = multiprocessing.Pipe()
    loop = StatefulEngineLoop(build_pipeline(EngineSpec("m", tiny_llm, kind=PipelineKind.STATEFUL)), engine_end)
    # Two requests wait; while the first would run, a cancel of the second and a shutdown arrive.
    loop._pending = [AddRequest(1, [5, 6, 7], PARAMS), AddRequest(2, [5, 6, 7], PARAMS)]
    for command in (CancelRequest(2), Shutdown()):
        if loop._on_command_received(command):
            loop._commands.put(command)
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "the loop never handled the queued cancel and shutdown"
    events = received(server_end)
    # The cancelled request ended without ever producing output, and nothing else started.
    assert RequestEnded(2) in events
    assert not any(isinstance(event, SequenceOutput) for event in events)
    assert loop._pending == [AddRequest(1, [5, 6, 7], PARAMS)]


def test_stats_are_answered_by_the_reader_without_queueing(tiny_llm: Path) -> None:
    server_end, engine_end = multiprocessing.Pipe()
    loop = StatefulEngineLoop(build_pipeline(EngineSpec("m", tiny_llm, kind=PipelineKind.STATEFUL)), engine_end)
    loop._on_command_received(AddRequest(7, [5, 6], PARAMS))
    assert loop._on_command_received(StatsRequest(99)) is False  # replied at once, even mid-generation
    (reply,) = received(server_end)
    assert isinstance(reply, StatsReply) and reply.token == 99
    assert reply.stats.active_requests == 1 and reply.stats.engine_requests == 0
