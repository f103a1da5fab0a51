"""The engine wire protocol: every message crosses the real channel intact, whole and in order,
without blocking the server's reads or waking the engine's reader; the test fault comes from one place."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ovserve.core.generation_config import GenerationParams
from ovserve.engine.channel import PipeChannel, engine_channel
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    EngineErrorKind,
    EngineStats,
    Fatal,
    Loading,
    LoadStage,
    Ready,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
    VisionPrompt,
)
from ovserve.engine.spec import BUSY_STEP_ENV, BUSY_STEP_SECONDS_ENV, FAULT_ENV, EngineFault
from ovserve.settings.schema import ModelSettings

PARAMS = GenerationParams(
    max_new_tokens=4, temperature=0.5, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
    presence_penalty=0.0, frequency_penalty=0.0, length_penalty=1.0, ignore_eos=False, seed=7, stop=("x",),
    stop_token_ids=(2,), include_stop=False, n=1, best_of=1, logprobs=True, skip_special_tokens=True,
    num_assistant_tokens=None, assistant_confidence_threshold=None, max_ngram_size=None, beam_search=False,
    structured_output={"regex": "[a-z]+"},
)  # fmt: skip


def channel() -> tuple[PipeChannel, PipeChannel]:
    return engine_channel(multiprocessing.get_context("spawn"))


def test_commands_and_event_batches_cross_a_pipe_unchanged() -> None:
    server_end, engine_end = channel()
    commands = [AddRequest(1, [5, 6, 7], PARAMS), CancelRequest(1), StatsRequest(9), Shutdown()]
    for command in commands:
        server_end.send(command)
    assert [engine_end.recv() for _ in commands] == commands

    events = [
        Loading(LoadStage.COMPILING),
        Ready(123),
        Fatal("no such model"),
        SequenceOutput(1, 0, "hé", 2, [(104, "h", -0.1), (233, "é", -0.2)], None),
        SequenceOutput(1, 1, "", 0, None, "length"),
        RequestEnded(1),
        RequestEnded(2, EngineErrorKind.IGNORED, "no room"),
        StatsReply(9, EngineStats(1, 2, 3, 4, 0.5)),
    ]
    engine_end.send(events)  # one write per engine step
    assert server_end.recv() == events
    engine_end.send(events)
    assert wait_for_messages(server_end, 1) == [events]


def wait_for_messages(server_end: PipeChannel, count: int, timeout: float = 10.0) -> list[object]:
    received: list[object] = []
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        if server_end.poll(0.1):
            received.extend(server_end.receive_ready())
    return received


def test_the_server_side_reads_whatever_has_arrived_without_waiting_for_the_rest() -> None:
    server_end, engine_end = channel()
    assert server_end.receive_ready() == []  # nothing yet: an empty answer, not a wait
    big = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)  # 4 MiB: many pipe-fulls
    writer = threading.Thread(target=lambda: [engine_end.send(item) for item in ([1], big, [2])])
    writer.start()
    received: list[object] = []
    calls = 0
    while len(received) < 3:
        calls += 1
        received.extend(server_end.receive_ready())  # returns at once with whole messages only
    writer.join()
    assert received[0] == [1] and received[2] == [2]
    np.testing.assert_array_equal(received[1], big)
    assert calls > 1  # the 4 MiB message came over several calls: no call waited for all of it


def test_the_server_side_sees_eof_after_the_last_message_once_the_engine_is_gone() -> None:
    server_end, engine_end = channel()
    engine_end.send(["last words"])
    engine_end.close()
    assert wait_for_messages(server_end, 1) == [["last words"]]
    with pytest.raises(EOFError):
        server_end.receive_ready()


def voluntary_switches(thread_id: int) -> int:
    status = Path(f"/proc/self/task/{thread_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_reading_events_does_not_wake_the_engine_thread_waiting_for_commands() -> None:
    # With one duplex socket pair, each read of the engine's events woke the engine's command
    # reader (the socket's one wait queue hears "space freed"): a wake per engine step.
    server_end, engine_end = channel()
    started = threading.Event()
    reader_id: list[int] = []

    def read_commands() -> None:
        reader_id.append(threading.get_native_id())
        started.set()
        engine_end.recv()  # blocks until the final command

    reader = threading.Thread(target=read_commands)
    reader.start()
    started.wait()
    time.sleep(0.2)  # let it block in recv
    before = voluntary_switches(reader_id[0])
    for step in range(200):
        engine_end.send([step])
        assert wait_for_messages(server_end, 1) == [[step]]
    woken = voluntary_switches(reader_id[0]) - before
    server_end.send(Shutdown())
    reader.join()
    assert woken < 10, f"the command reader woke {woken} times while 200 event batches were read"


def test_a_vision_prompt_crosses_with_its_image_bytes() -> None:
    server_end, engine_end = channel()
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    server_end.send(AddRequest(1, VisionPrompt("<ov_genai_image_0> what?", [image]), PARAMS))
    received = engine_end.recv()
    assert isinstance(received.prompt, VisionPrompt)
    assert received.prompt.text == "<ov_genai_image_0> what?"
    np.testing.assert_array_equal(received.prompt.images[0], image)


def test_the_step_fault_is_off_unless_its_variable_is_set() -> None:
    assert EngineFault.from_environment({}) is None
    assert EngineFault.from_environment({FAULT_ENV: "0"}) is None
    assert EngineFault.from_environment({FAULT_ENV: "777"}) == EngineFault(fail_step_on_max_new_tokens=777)
    busy = EngineFault.from_environment({BUSY_STEP_ENV: "777", BUSY_STEP_SECONDS_ENV: "6"})
    assert busy == EngineFault(busy_step_on_max_new_tokens=777, busy_step_seconds=6.0)


def test_the_engine_spec_carries_the_fault_the_server_environment_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ModelSettings.model_construct(name="m", path=Path("/models/m"))
    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert settings.engine_spec().fault is None
    monkeypatch.setenv(FAULT_ENV, "777")
    assert settings.engine_spec().fault == EngineFault(fail_step_on_max_new_tokens=777)
