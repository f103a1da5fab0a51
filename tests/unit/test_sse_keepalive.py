"""The stream writer's keep-alive: a frame after a whole interval without a write, driven by one
timer per stream (no task or timer per event), and nothing once the stream has ended. Time is the
event loop's, read through the writer's loop: the test moves it instead of sleeping. And a burst
of events: one write of the frames the events would have had one by one."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

from aiohttp.test_utils import make_mocked_request

from ovserve.api.anthropic import MessagesWriter
from ovserve.api.sse import NamedEventWriter, SSEWriter
from ovserve.dialects.body import Burst, EncodedBody


class Frames:
    """A payload writer that keeps what it is given."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.buffer_size = 0
        self.output_size = 0

    async def write(self, data: bytes, **_: Any) -> None:
        self.frames.append(bytes(data))

    async def write_headers(self, *_: Any) -> None:
        pass

    async def write_eof(self, data: bytes = b"") -> None:
        self.frames.append(b"<eof>")

    async def drain(self) -> None:
        pass

    def enable_chunking(self) -> None:
        pass

    def enable_compression(self, *_: Any, **__: Any) -> None:
        pass

    def send_headers(self) -> None:
        pass

    def set_eof(self) -> None:
        pass


class Clock:
    """The loop's time as the writer reads it, moved by the test."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()

    def __call__(self) -> float:
        return self.now


async def _open(kind: type[SSEWriter]) -> tuple[SSEWriter, Frames, Clock]:
    frames = Frames()
    request = make_mocked_request("POST", "/v1/messages", writer=frames)
    request.transport.is_closing.return_value = False  # type: ignore[union-attr]
    writer = kind(request)
    await writer.open()
    assert writer._loop is not None
    clock = Clock(writer._loop)
    writer._loop = mock.Mock(wraps=writer._loop, time=clock)
    writer._written = clock.now
    return writer, frames, clock


def _event(text: str) -> EncodedBody:
    return EncodedBody(f'{{"type":"ping_test","text":"{text}"}}', "ping_test")


async def test_a_quiet_stream_gets_a_keepalive_after_each_interval_of_silence() -> None:
    writer, frames, clock = await _open(NamedEventWriter)
    interval = writer.keepalive_interval
    clock.now += interval / 2
    writer._tick()  # half an interval of silence: nothing yet
    await asyncio.sleep(0)
    assert frames.frames == []
    clock.now += interval / 2
    writer._tick()
    await asyncio.sleep(0)  # the ping's write
    assert frames.frames == [b": ping\n\n"]
    await writer.send(_event("a"))
    clock.now += interval * 0.9
    writer._tick()  # an event 0.9 interval ago: the connection is busy enough
    await asyncio.sleep(0)
    assert frames.frames[-1].startswith(b"event: ping_test\n")
    await writer.done()
    assert frames.frames[-1] == b"<eof>"
    assert writer._timer is None  # the stream's one timer is gone with it


async def test_one_timer_per_stream_and_no_task_per_event() -> None:
    writer, _, _ = await _open(NamedEventWriter)
    timer = writer._timer
    tasks = len(asyncio.all_tasks())
    for n in range(50):
        await writer.send(_event(str(n)))
    assert writer._timer is timer and len(asyncio.all_tasks()) == tasks
    await writer.done()


async def test_a_stream_its_client_left_stops_its_timer() -> None:
    writer, frames, clock = await _open(NamedEventWriter)
    writer._request.transport.is_closing.return_value = True  # type: ignore[union-attr]
    clock.now += writer.keepalive_interval * 3
    writer._tick()
    await asyncio.sleep(0)
    assert frames.frames == [] and writer._timer is None


async def test_chat_streams_keep_no_keepalive() -> None:
    frames = Frames()
    writer = SSEWriter(make_mocked_request("POST", "/v3/chat/completions", writer=frames))
    await writer.open()
    assert writer._timer is None
    await writer.send(EncodedBody("{}"))
    await writer.done()
    assert frames.frames == [b"data: {}\n\n", b"data: [DONE]\n\n", b"<eof>"]


async def test_anthropic_streams_keep_alive_with_anthropics_own_ping_event() -> None:
    """Anthropic's SDKs and Claude Code read ``event: ping`` as the API's keep-alive."""
    writer, frames, clock = await _open(MessagesWriter)
    clock.now += writer.keepalive_interval
    writer._tick()
    await asyncio.sleep(0)
    assert frames.frames == [b'event: ping\ndata: {"type":"ping"}\n\n']
    await writer.done()


async def test_a_burst_is_one_write_of_the_frames_its_events_would_have_alone() -> None:
    for kind in (NamedEventWriter, SSEWriter):
        written: dict[str, Frames] = {"one by one": Frames(), "burst": Frames()}
        writers = {how: kind(make_mocked_request("POST", "/", writer=frames)) for how, frames in written.items()}
        for writer in writers.values():
            await writer.open()
        for text in "abc":
            await writers["one by one"].send(_event(text))
        await writers["burst"].send(Burst(tuple(_event(text) for text in "abc")))
        assert len(written["one by one"].frames) == 3
        assert written["burst"].frames == [b"".join(written["one by one"].frames)]
        for writer in writers.values():
            writer._disarm()
