"""Speech to text end to end: tiny-whisper served by WhisperPipeline, called with the real ``openai`` SDK.

The audio is made here with PyAV (tests/audio_files.py): a tone, so the random model's text means
nothing, but its shape does (every response_format, the stream's deltas adding up to its final
text, usage in seconds). Hostile uploads are each a 400 naming the problem, the engine that
served them is the same process afterwards, and the server's and the engine's RSS come back to
their warm baseline.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pysubs2
import pytest

from ovserve.engine.memory import resident_memory_bytes
from tests.audio_files import CONTAINERS, hostile_audio, make_audio
from tests.conftest import Server, start_server
from tests.served_openapi import EVENTS, ServedSchemas

MODEL = "tiny-whisper"
MAX_AUDIO_SECONDS = 40
MAX_REQUEST_MB = 2


@pytest.fixture(scope="module")
def speech_server(speech_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("speech-server"),
        speech_models[MODEL],
        "--task",
        "speech_to_text",
        "--max_audio_seconds",
        str(MAX_AUDIO_SECONDS),
        "--max_request_mb",
        str(MAX_REQUEST_MB),
        model_name=MODEL,
    )
    yield running
    running.stop()


@pytest.fixture()
def client(speech_server: Server) -> openai.OpenAI:
    return speech_server.client()


def _wav(seconds: float = 3.0) -> tuple[str, bytes]:
    return ("tone.wav", make_audio("wav", 16_000, 1, seconds))


def test_json(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav())
    assert isinstance(result.text, str) and result.text.strip()
    assert result.usage is not None and result.usage.type == "duration" and result.usage.seconds == 3


def test_text(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav(), response_format="text")
    json_result = client.audio.transcriptions.create(model=MODEL, file=_wav())
    assert isinstance(result, str) and result == json_result.text  # greedy: the same text


def _subtitles(text: str, format_: str) -> list[pysubs2.SSAEvent]:
    """The cues of an srt/vtt answer, parsed by a subtitle library; their times are monotone and
    within the 3 s clip, and each cue has text."""
    events = list(pysubs2.SSAFile.from_string(text, format_=format_))
    assert events, text
    previous_end = 0
    for event in events:
        assert previous_end <= event.start <= event.end <= 3000, text  # milliseconds
        assert event.plaintext.strip()
        previous_end = event.end
    return events


def test_srt(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav(), response_format="srt")
    lines = result.splitlines()
    assert lines[0] == "1"
    assert lines[1].startswith("00:00:") and " --> 00:00:03,000" in lines[1]
    events = _subtitles(result, "srt")
    # The cues are verbose_json's segments (both are decoded with timestamps; greedy: the same ones).
    verbose = client.audio.transcriptions.create(model=MODEL, file=_wav(), response_format="verbose_json")
    assert verbose.segments is not None
    assert [event.plaintext.strip() for event in events] == [segment.text.strip() for segment in verbose.segments]
    assert [event.start for event in events] == [round(segment.start * 1000) for segment in verbose.segments]


def test_vtt(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav(), response_format="vtt")
    lines = result.splitlines()
    assert lines[0] == "WEBVTT"
    assert " --> " in lines[2] and lines[2].endswith("00:00:03.000")
    assert _subtitles(result, "vtt")[-1].end == 3000


def test_verbose_json_with_segments(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        model=MODEL,
        file=_wav(),
        response_format="verbose_json",
        timestamp_granularities=["segment"],
        language="fr",
    )
    assert result.language == "french"
    assert result.duration == pytest.approx(3.0)
    assert result.segments, result
    previous_end = 0.0
    for segment in result.segments:  # monotone: each segment starts where (or after) the last ended
        assert previous_end <= segment.start <= segment.end <= 3.0
        previous_end = segment.end
    assert "".join(segment.text for segment in result.segments) == result.text
    assert result.usage is not None and result.usage.seconds == 3


def test_long_audio_spans_two_windows(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav(35.0), response_format="verbose_json")
    assert result.duration == pytest.approx(35.0)
    assert result.segments and result.segments[-1].end <= 35.0
    assert result.segments[-1].end > 30.0, [(s.start, s.end) for s in result.segments]
    # The second window's timestamps continue the first's (offset by where it starts), never go back.
    times = [time for segment in result.segments for time in (segment.start, segment.end)]
    assert times == sorted(times), [(s.start, s.end) for s in result.segments]


def test_stream_deltas_add_up_to_the_done_text(client: openai.OpenAI) -> None:
    unary = client.audio.transcriptions.create(model=MODEL, file=_wav())
    stream = client.audio.transcriptions.create(model=MODEL, file=_wav(), stream=True)
    deltas, done = [], None
    for event in stream:
        if event.type == "transcript.text.delta":
            assert done is None
            deltas.append(event.delta)
        else:
            assert event.type == "transcript.text.done"
            done = event
    assert done is not None and len(deltas) > 1
    assert "".join(deltas) == done.text == unary.text
    assert done.usage is not None and done.usage.seconds == 3  # type: ignore[union-attr]


def test_answers_and_stream_events_match_the_served_openapi_document(speech_server: Server) -> None:
    schemas = ServedSchemas(httpx.get(f"{speech_server.url}/openapi.json", timeout=30).json())
    url = f"{speech_server.url}/v3/audio/transcriptions"
    for response_format, component in (("json", "Transcription"), ("verbose_json", "VerboseTranscription")):
        answer = httpx.post(url, data={"model": MODEL, "response_format": response_format}, files={"file": _wav()})
        assert answer.status_code == 200, answer.text
        schemas.validate_component(component, answer.json())
    with httpx.stream("POST", url, data={"model": MODEL, "stream": "true"}, files={"file": _wav()}) as streamed:
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    assert [event["type"] for event in events[-1:]] == ["transcript.text.done"]
    for event in events:
        schemas.validate_answer("/v3/audio/transcriptions", event, EVENTS)


def test_translation(client: openai.OpenAI) -> None:
    result = client.audio.translations.create(model=MODEL, file=_wav(), response_format="verbose_json")
    assert result.text.strip() and result.language == "english"
    text = client.audio.translations.create(model=MODEL, file=_wav(), response_format="text")
    assert isinstance(text, str) and text.strip()


def test_v1_prefix(speech_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{speech_server.url}/v1", api_key="unused", max_retries=0)
    assert client.audio.transcriptions.create(model=MODEL, file=_wav()).text


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_every_container_rate_and_layout(client: openai.OpenAI, container: str) -> None:
    for rate in (8_000, 16_000, 44_100, 48_000):
        for channels in (1, 2):
            data = make_audio(container, rate, channels, seconds=1.0)
            result = client.audio.transcriptions.create(model=MODEL, file=(f"a.{container}", io.BytesIO(data)))
            assert result.text.strip(), (container, rate, channels)


HOSTILE = hostile_audio(MAX_AUDIO_SECONDS)
MB = 1024 * 1024
# Passes of the table after the warm-up pass; whatever a pass kept would be kept RSS_ROUNDS times.
RSS_ROUNDS = 5
# How far each process's RSS may end from its warm baseline. Measured here (3 runs, 75 passes after
# the warm-up; docs/audio.md): the server settled +0.11-0.12 MB above its baseline within 3 passes
# and stayed there (30 passes: no trend), once in a while +0.75 MB for one sample (one 672 KB
# upload not yet freed), and came back; the engine moved by at most 0.01 MB. The server's margin
# is twice its worst sample, and half what a small leak adds over RSS_ROUNDS passes: keeping the
# one big upload of each pass (672 KB; injected on purpose once) ended 3.06 MB above the baseline.
# The engine never sees these uploads: its margin is two of Python's 256 KB memory arenas.
SERVER_RSS_MARGIN = 1.5 * MB
ENGINE_RSS_MARGIN = 0.5 * MB


def _send_the_table(server: Server) -> list[tuple[str, int, str]]:
    """Every hostile upload once; the ones not answered by a 400 naming the problem."""
    failures = []
    for case, (data, words) in HOSTILE.items():
        response = httpx.post(
            f"{server.url}/v3/audio/transcriptions",
            data={"model": MODEL},
            files={"file": ("upload.wav", data, "audio/wav")},
            timeout=30,
        )
        error = (
            response.json().get("error", {})
            if response.headers.get("content-type", "").startswith("application/json")
            else {}
        )
        if response.status_code != 400 or words not in error.get("message", "").lower() or error.get("param") != "file":
            failures.append((case, response.status_code, response.text[:200]))
    return failures


def _rss(pids: list[int]) -> list[int]:
    return [resident_memory_bytes(pid) or 0 for pid in pids]


def test_hostile_audio_is_a_400_naming_the_problem_and_rss_comes_back(
    speech_server: Server, client: openai.OpenAI
) -> None:
    engines = speech_server.engine_pids()
    pids = [speech_server.process.pid, *engines]
    assert len(pids) == 2
    # Warm-up: a transcription (the engine's first request sizes its buffers) and one pass of the
    # table (FFmpeg's demuxers and decoders, the decode threads and their allocator arenas).
    assert client.audio.transcriptions.create(model=MODEL, file=_wav()).text
    assert not _send_the_table(speech_server)
    baseline = _rss(pids)
    for _ in range(RSS_ROUNDS):
        assert not _send_the_table(speech_server)
    after = _rss(pids)
    assert len(HOSTILE) >= 20
    assert speech_server.engine_pids() == engines  # nothing reached (or killed) the engine
    assert httpx.get(f"{speech_server.url}/v2/health/ready").status_code == 200
    figures = ", ".join(
        f"{role} {then / MB:.1f} -> {now / MB:.1f} MB"
        for role, then, now in zip(("server", "engine"), baseline, after, strict=True)
    )
    assert after[0] - baseline[0] < SERVER_RSS_MARGIN, figures
    assert abs(after[1] - baseline[1]) < ENGINE_RSS_MARGIN, figures


FORM_ERRORS = [
    ({"model": MODEL, "language": "xx"}, "language", "no language 'xx'"),
    ({"model": MODEL, "language": "english"}, "language", "iso-639-1"),
    ({"model": MODEL, "temperature": "5"}, "temperature", "between 0 and 1"),
    ({"model": MODEL, "temperature": "warm"}, "temperature", "number"),
    ({"model": MODEL, "response_format": "xml"}, "response_format", "one of"),
    # Served without --enable_word_timestamps (tests/e2e/test_audio_words.py serves it with).
    (
        {"model": MODEL, "response_format": "verbose_json", "timestamp_granularities[]": "word"},
        "timestamp_granularities[]",
        "--enable_word_timestamps",
    ),
    ({"model": MODEL, "timestamp_granularities[]": "segment"}, None, "verbose_json"),
    ({"model": MODEL, "stream": "true", "response_format": "srt"}, "stream", "json or text"),
    ({"model": MODEL, "stream": "maybe"}, "stream", "true or false"),
    ({}, "model", "'model' is required"),
]


@pytest.mark.parametrize(("fields", "param", "words"), FORM_ERRORS)
def test_form_errors(speech_server: Server, fields: dict[str, str], param: str | None, words: str) -> None:
    response = httpx.post(
        f"{speech_server.url}/v1/audio/transcriptions", data=fields, files={"file": _wav()}, timeout=30
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"].lower()
    if param is not None:
        assert error["param"] == param


def test_translation_refuses_language_and_stream(speech_server: Server) -> None:
    for field in ({"language": "de"}, {"stream": "true"}):
        response = httpx.post(
            f"{speech_server.url}/v1/audio/translations", data={"model": MODEL, **field}, files={"file": _wav()}
        )
        assert response.status_code == 400 and response.json()["error"]["param"] == next(iter(field))


def test_missing_file_unknown_model_json_body_and_too_large(speech_server: Server) -> None:
    url = f"{speech_server.url}/v1/audio/transcriptions"
    missing = httpx.post(url, data={"model": MODEL}, files={"other": ("x", b"y")})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
    as_text = httpx.post(url, data={"model": MODEL, "file": "not a file"}, files={"other": ("x", b"y")})
    assert as_text.status_code == 400 and as_text.json()["error"]["param"] == "file"
    unknown = httpx.post(url, data={"model": "nope"}, files={"file": _wav()})
    assert unknown.status_code == 404
    as_json = httpx.post(url, json={"model": MODEL, "file": "AAAA"})
    assert as_json.status_code == 415 and "multipart/form-data" in as_json.json()["error"]["message"]
    big = httpx.post(
        url, data={"model": MODEL}, files={"file": ("big.wav", b"\0" * (MAX_REQUEST_MB * 1024 * 1024 + 1))}
    )
    assert big.status_code == 413


def test_chat_is_refused_by_a_speech_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="speech to text"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])


def test_a_part_header_aiohttp_cannot_parse_is_a_400(speech_server: Server) -> None:
    # Found by the positive fuzzer: raw non-UTF-8 bytes and a control character in a part's name.
    boundary = b"5d51d4c03999dfa14f2e3b67760f33d8"
    name = b"k\xc3\x96\xf0\xb5\xa7\xa0\x02x\x15"
    body = (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="' + name + b'"\r\n\r\n1\r\n'
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\nA\r\n'
        b"--" + boundary + b"--\r\n"
    )
    for task in ("transcriptions", "translations"):
        response = httpx.post(
            f"{speech_server.url}/v3/audio/{task}",
            content=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary.decode()}"},
            timeout=60,
        )
        assert response.status_code == 400, response.text
        assert "multipart form cannot be read" in response.json()["error"]["message"]
